"""Pictures drawn on the server as inline SVG: no JavaScript, no external assets.

Each chart is a ``viewBox`` the page stretches to its width (a laptop or a 390 px phone);
its colours are classes whose fills ``admin.css`` takes from the admin's light and dark
themes; its text (scales, legends, times) is HTML around it, so it reads at any width; every
mark has a ``<title>`` (a tooltip, and what a screen reader says), and the outcomes of slots
differ by shape as well as colour (a missed slot is an outline, a skipped one a short bar).
Everything shown is escaped (``format_html``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from django_dsched.health.slots import Outcome, Slot

BAR = 10  # width of a bar in the viewBox
GAP = 2
HEIGHT = 40  # the timeline's height in the viewBox
CHART_HEIGHT = 100  # the bar and line charts'


@dataclass(frozen=True, slots=True)
class Chart:
    svg: SafeString
    top: str  # the scale's top, in words ("12.5 s", "340")
    legend: list[tuple[str, str]]  # (css class, label)


def _svg(width: int, height: int, label: str, css: str, body: SafeString) -> SafeString:
    return format_html(
        '<svg class="dsched-chart {}" viewBox="0 0 {} {}" preserveAspectRatio="none" '
        'role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg">{}</svg>',
        css,
        max(width, 1),
        height,
        label,
        body,
    )


def _baseline(width: int) -> SafeString:
    return format_html(
        '<line class="dsched-baseline" x1="0" y1="{}" x2="{}" y2="{}" '
        'vector-effect="non-scaling-stroke"></line>',
        CHART_HEIGHT,
        width,
        CHART_HEIGHT,
    )


def _rect(css: str, x: float, y: float, w: float, h: float, title: str) -> SafeString:
    return format_html(
        '<rect class="{}" x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>',
        css,
        f"{x:.1f}",
        f"{y:.1f}",
        f"{w:.1f}",
        f"{h:.1f}",
        title,
    )


def slot_class(outcome: str) -> str:
    return f"dsched-slot dsched-slot-{outcome.lower().replace('_', '-')}"


def seconds(value: float) -> str:
    if value < 10:
        return _("%(s).1f s") % {"s": value}
    if value < 120:
        return _("%(s)d s") % {"s": value}
    if value < 7200:
        return _("%(m)d min") % {"m": value // 60}
    return _("%(h).1f h") % {"h": value / 3600}


def describe_slot(slot: Slot, when: Callable[[Slot], str]) -> str:
    """A slot's tooltip: its time, outcome, lag and run."""
    parts = [when(slot), str(Outcome(slot.outcome).label)]
    if slot.lag is not None:
        parts.append(_("fired %(lag)s after its run time") % {"lag": seconds(slot.lag)})
    if slot.run:
        parts.append(_("run: %(run)s") % {"run": slot.run.lower().replace("_", " ")})
    return " · ".join(parts)


def timeline(slots: Sequence[Slot], when: Callable[[Slot], str]) -> Chart:
    """One mark per slot, oldest first: on time, late and failed as full bars, missed as an
    outline, skipped as a short bar, due as a thin one."""
    marks = []
    for i, slot in enumerate(slots):
        x = i * (BAR + GAP)
        css = slot_class(slot.outcome)
        title = describe_slot(slot, when)
        if slot.outcome == Outcome.MISSED:
            marks.append(_rect(css, x + 1, 2, BAR - 2, HEIGHT - 4, title))
        elif slot.outcome == Outcome.SKIPPED:
            marks.append(_rect(css, x, HEIGHT / 3, BAR, HEIGHT / 3, title))
        elif slot.outcome == Outcome.DUE:
            marks.append(_rect(css, x + BAR / 3, 0, BAR / 3, HEIGHT, title))
        else:
            marks.append(_rect(css, x, 0, BAR, HEIGHT, title))
    width = len(slots) * (BAR + GAP) - GAP
    label = _("The last %(n)d slots, oldest first") % {"n": len(slots)}
    body = format_html_join("", "{}", ((m,) for m in marks))
    legend = [(slot_class(value), str(label)) for value, label in Outcome.choices]
    return Chart(_svg(width, HEIGHT, label, "dsched-timeline", body), "", legend)


def lag_chart(slots: Sequence[Slot], grace: float, when: Callable[[Slot], str]) -> Chart:
    """Each fired slot's lag (fire minus run time) as a bar, the grace as a dashed line; a
    slot that did not fire leaves a gap."""
    fired = [s.lag for s in slots if s.lag is not None]
    top = max([*fired, grace * 1.2 if fired and max(fired) > grace else 0.0, 0.001])
    marks = []
    for i, slot in enumerate(slots):
        if slot.lag is None:
            continue
        h = max(1.0, slot.lag / top * CHART_HEIGHT)
        x = i * (BAR + GAP)
        marks.append(
            _rect(slot_class(slot.outcome), x, CHART_HEIGHT - h, BAR, h, describe_slot(slot, when))
        )
    width = max(1, len(slots) * (BAR + GAP) - GAP)
    marks.append(_baseline(width))
    if grace <= top:
        y = CHART_HEIGHT - grace / top * CHART_HEIGHT
        marks.append(
            format_html(
                '<line class="dsched-grace" x1="0" y1="{}" x2="{}" y2="{}" '
                'vector-effect="non-scaling-stroke"><title>{}</title></line>',
                f"{y:.1f}",
                width,
                f"{y:.1f}",
                _("grace: %(g)s") % {"g": seconds(grace)},
            )
        )
    label = _("Fire lag of the last %(n)d slots (highest %(top)s)") % {
        "n": len(slots),
        "top": seconds(top),
    }
    body = format_html_join("", "{}", ((m,) for m in marks))
    legend = [("dsched-grace-key", _("grace (late past it)"))]
    return Chart(_svg(width, CHART_HEIGHT, label, "dsched-lag", body), seconds(top), legend)


def bars(values: Sequence[int], css: str, label: str, titles: Sequence[str]) -> Chart:
    """A bar per value (a minute's count), the tallest reaching the top."""
    top = max([*values, 1])
    marks = []
    for i, (value, title) in enumerate(zip(values, titles, strict=True)):
        h = value / top * CHART_HEIGHT
        if value:
            h = max(h, 1.0)
        marks.append(_rect(css, i * (BAR + GAP), CHART_HEIGHT - h, BAR, h, title))
    width = len(values) * (BAR + GAP) - GAP
    marks.append(_baseline(width))
    body = format_html_join("", "{}", ((m,) for m in marks))
    return Chart(_svg(width, CHART_HEIGHT, label, "dsched-bars", body), str(top), [])


def area(values: Sequence[int], css: str, label: str, titles: Sequence[str]) -> Chart:
    """A filled line through the values (the backlog at the end of each minute)."""
    top = max([*values, 1])
    step = BAR + GAP
    points = [
        (i * step + BAR / 2, CHART_HEIGHT - value / top * CHART_HEIGHT)
        for i, value in enumerate(values)
    ]
    width = len(values) * step - GAP
    outline = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    filled = f"0,{CHART_HEIGHT} {outline} {width},{CHART_HEIGHT}"
    hits = format_html_join(
        "",
        "{}",
        (
            (_rect("dsched-hit", i * step, 0, step, CHART_HEIGHT, title),)
            for i, title in enumerate(titles)
        ),
    )
    body = format_html(
        '<polygon class="{}" points="{}"></polygon>'
        '<polyline class="{}-line" points="{}" fill="none" '
        'vector-effect="non-scaling-stroke"></polyline>{}',
        css,
        filled,
        css,
        outline,
        hits,
    )
    return Chart(_svg(width, CHART_HEIGHT, label, "dsched-area", body), str(top), [])


def legend(items: Sequence[tuple[str, str]]) -> SafeString:
    """A legend: a swatch of each class and its label, as an HTML list that wraps."""
    if not items:
        return mark_safe("")
    return format_html(
        '<ul class="dsched-legend">{}</ul>',
        format_html_join(
            "",
            '<li><svg class="dsched-swatch" viewBox="0 0 10 10" aria-hidden="true">'
            '<rect class="{}" x="0" y="0" width="10" height="10"></rect></svg>{}</li>',
            items,
        ),
    )
