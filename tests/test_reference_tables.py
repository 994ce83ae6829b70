"""docs/reference.md's tables say what the models are (issue 41: the schedule table repeated
columns, and its copies disagreed on the states and the origins): each table lists each
column of its model once and no other, and a column with choices lists exactly the model's
choices; each table's heading appears once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import models

from django_dsched.models import Lease, Schedule

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference.md"
TEXT = REFERENCE.read_text()


def table_after(heading: str) -> list[list[str]]:
    """The rows (cells) of the first table under ``heading``."""
    lines = TEXT[TEXT.index(heading) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def named_columns(cell: str) -> list[str]:
    return re.findall(r"`([a-z_]+)`", cell)


def columns(model: type[models.Model]) -> set[str]:
    return {str(field.column) for field in model._meta.concrete_fields}


@pytest.mark.parametrize(
    ("heading", "model"),
    [
        ("### `schedule_t` (`Schedule`)", Schedule),
        ("### `scheduler_lock_t` (`Lease`)", Lease),
    ],
)
def test_each_column_is_documented_once(heading, model):
    assert TEXT.count(heading) == 1, heading
    documented = [name for row in table_after(heading) for name in named_columns(row[0])]
    assert len(documented) == len(set(documented)), sorted(
        {n for n in documented if documented.count(n) > 1}
    )
    assert set(documented) == columns(model), set(documented) ^ columns(model)


def test_the_schedule_tables_choices_are_the_models():
    rows = {named_columns(row[0])[0]: row for row in table_after("### `schedule_t` (`Schedule`)")}
    for field in Schedule._meta.concrete_fields:
        if not field.choices:
            continue
        listed = re.findall(r"`([A-Z_]+)`", rows[field.column][1])
        assert listed == [value for value, _label in field.choices], field.column


def test_no_table_heading_is_written_twice():
    headings = re.findall(r"^#{2,4} .*$", TEXT, flags=re.MULTILINE)
    tables = [h for h in headings if re.match(r"^#{2,4} `[a-z_]+_t`", h)]
    assert len(tables) == len(set(tables)), tables
    names = [re.match(r"^#{2,4} `([a-z_]+_t)`", h).group(1) for h in tables]  # type: ignore[union-attr]
    assert len(names) == len(set(names)), names
