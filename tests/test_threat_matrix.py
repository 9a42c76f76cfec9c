"""docs/threat-model.md's matrix is complete and names only tests that exist: attackers as rows,
assets as columns, every cell filled (what holds with the test that attacks it, "trusted by
design" and why, or "open:" with the issue that tracks the hole), and every
`tests/<file>.py::<test>` it cites, anywhere on the page, a test function of that file."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "threat-model.md"
ATTACKERS = ["unkeyed agent", "keyed agent", "holder of a stolen receipt",
             "someone with the ledger file", "someone with the ledger and the key store",
             "someone with a backup", "someone with a role on a team ledger's database",
             "the operator"]
ASSETS = ["what is believed", "who wrote it", "an erasure", "the evidence of an action",
          "a review decision"]
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
OPEN = re.compile(r"\bopen: .+?, issue \d+")


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def matrix(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """(asset columns, {attacker row label: its cells}) of the table under '## The matrix'."""
    section = text.split("\n## The matrix\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header, rule, *body = rows
    assert set(rule.replace("|", "").strip()) <= {"-", ":", " "}, rule
    columns = _cells(header)
    return columns[1:], {cells[0]: cells[1:] for cells in map(_cells, body)}


@cache
def functions_of(path: str) -> frozenset[str]:
    """Every test function a test file defines, at module level or in a class."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return frozenset(node.name for node in ast.walk(tree)
                     if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                     and node.name.startswith("test"))


def problems(text: str) -> list[str]:
    """Everything wrong with a threat-model page's matrix, as sentences (empty when sound)."""
    found: list[str] = []
    columns, rows = matrix(text)
    if columns != ASSETS:
        found.append(f"asset columns are {columns}, not {ASSETS}")
    labels = list(rows)
    for attacker in ATTACKERS:
        if not any(label.startswith(attacker) for label in labels):
            found.append(f"no row for the attacker '{attacker}'")
    if len(labels) != len(ATTACKERS):
        found.append(f"{len(labels)} attacker rows, not {len(ATTACKERS)}")
    for label, cells in rows.items():
        if len(cells) != len(ASSETS):
            found.append(f"row '{label}' has {len(cells)} cells, not {len(ASSETS)}")
        for asset, cell in zip(ASSETS, cells, strict=False):
            if not (TEST_REF.search(cell) or "trusted by design" in cell or OPEN.search(cell)):
                found.append(f"cell '{label}' x '{asset}' names no test, is not trusted by "
                             "design and is not marked open")
            if "open:" in cell and not OPEN.search(cell):
                found.append(f"cell '{label}' x '{asset}' is open without naming its issue")
    for path, name in TEST_REF.findall(text):
        if not (ROOT / path).is_file():
            found.append(f"{path} does not exist")
        elif name not in functions_of(path):
            found.append(f"{path} has no test {name}")
    return found


def test_the_matrix_is_complete_and_every_named_test_exists() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert problems(text) == []
    assert len(TEST_REF.findall(text)) >= 35


def test_the_open_cells_name_their_issue() -> None:
    _columns, rows = matrix(PAGE.read_text(encoding="utf-8"))
    opened = [(label, asset) for label, cells in rows.items()
              for asset, cell in zip(ASSETS, cells, strict=True) if "open:" in cell]
    # Every open cell names the issue that tracks it (issue 31 closed its own; the team
    # ledger's erasure cell is open for issue 34).
    assert all(OPEN.search(rows[label][ASSETS.index(asset)]) for label, asset in opened), opened


@pytest.mark.parametrize(("change", "problem"), [
    (lambda t: t.replace("test_review_own_write`", "test_review_own_writes`", 1),
     "tests/test_lifecycle.py has no test test_review_own_writes"),
    (lambda t: t.replace("`tests/test_lifecycle.py::", "`tests/test_lifecycles.py::", 1),
     "tests/test_lifecycles.py does not exist"),
    (lambda t: re.sub(r"(\n\| the operator[^|]*\|)[^|]*\|", r"\1  |", t, count=1),
     "cell 'the operator (the OS user who holds every file and key)' x 'what is believed' names "
     "no test, is not trusted by design and is not marked open"),
    (lambda t: re.sub(r"\n\| someone with a backup[^\n]*", "", t, count=1),
     "no row for the attacker 'someone with a backup'"),
    (lambda t: t.replace("| a review decision |", "| a decision |", 1),
     "asset columns are"),
])
def test_the_check_finds_each_defect(change, problem) -> None:  # type: ignore[no-untyped-def]
    """The check can fail: a misspelt test, a missing file, an empty cell, a dropped row."""
    text = PAGE.read_text(encoding="utf-8")
    changed = change(text)
    assert changed != text
    assert any(p.startswith(problem) for p in problems(changed)), problems(changed)
