"""Field validators' helpers that need no database."""

from __future__ import annotations

import pytest

from django_dsched.models.validators import make_storable_text, storable_text


@pytest.mark.parametrize(
    ("text", "limit", "stored"),
    [
        ("plain text", None, "plain text"),
        ("bad\x00reply", None, "bad\\x00reply"),
        ("lone \udcff surrogate", None, "lone \\udcff surrogate"),
        ("\ud83d\ude00 as two halves", None, "\\ud83d\\ude00 as two halves"),
        ("paired \U0001f600 emoji", None, "paired \U0001f600 emoji"),
        ("x" * 50, 10, "x" * 10),
        ("\x00" * 10, 7, "\\x00\\x0"),
    ],
)
def test_make_storable_text(text, limit, stored):
    result = make_storable_text(text, limit)
    assert result == stored
    assert storable_text(result)
    assert limit is None or len(result) <= limit


def test_storable_text_is_returned_as_it_is():
    text = "already fine: é ✓"
    assert make_storable_text(text) is text
