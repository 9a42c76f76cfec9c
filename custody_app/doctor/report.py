"""The doctor's read models: one verdict per check, and the report that collects them."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal

from custody_app.domain.readmodels import ReadModel

Outcome = Literal["ok", "warn", "FAIL"]


class DoctorCheck(ReadModel):
    """One check: `name` is stable, `detail` one sentence naming the file it looked at."""

    name: str
    outcome: Outcome
    detail: str


class DoctorReport(ReadModel):
    """Every check run; `ok` is true when none failed (warnings allowed); `opened` is false
    when the ledger could not be opened at all (then only the install was checked)."""

    ledger: str
    opened: bool
    checks: list[DoctorCheck]
    ok: bool

    @property
    def warnings(self) -> int:
        return sum(c.outcome == "warn" for c in self.checks)

    def render(self) -> str:
        width = max(len(c.name) for c in self.checks)
        return "\n".join(f"{c.outcome:<4} {c.name:<{width}}  {c.detail}" for c in self.checks)


def check(name: str, outcome: Outcome, detail: str) -> DoctorCheck:
    return DoctorCheck(name=name, outcome=outcome, detail=detail)


def loose_mode(path: str | Path) -> int | None:
    """The file's permission bits when group or others have any access, else None."""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    return mode if mode & 0o077 else None
