"""Systems under test behind one small interface: the ledger, and a naive overwrite store."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Protocol

from custody_app.domain.policy import LoadedPolicy
from custody_app.domain.timeutil import ManualClock
from custody_app.ledger.facade import Ledger
from custody_app.ledger.ops import Aliases, run_op


class MemoryUnderTest(Protocol):
    """What the harness needs of a memory: start empty, apply ops, answer reads."""

    name: str

    def reset(self) -> None:
        """Forget everything: the next op starts a new scenario."""

    def write(self, op: dict[str, Any]) -> str | None:
        """Apply one non-read batch op; the error code when the memory refused it, else None."""

    def read(self, op: dict[str, Any]) -> list[Any]:
        """Answer one `as_of` op: every value believed for its subject and predicate."""

    def close(self) -> None:
        """Release what the memory holds."""


class LedgerMemory:
    """The real ledger: a fresh file per scenario, ops through the batch runner (`run_op`),
    with --manual-clock semantics so `clock` ops set transaction time."""

    name = "ledger"

    def __init__(self, policy: str | Path | LoadedPolicy | None = None) -> None:
        self._policy = policy
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._ledger: Ledger | None = None
        self._aliases = Aliases()
        self._line = 0

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            self.reset()
        assert self._ledger is not None
        return self._ledger

    def reset(self) -> None:
        self.close()
        self._tmp = tempfile.TemporaryDirectory(prefix="custody-eval-")
        self._ledger = Ledger.open(Path(self._tmp.name) / "eval.db", policy=self._policy,
                                   clock=ManualClock())
        self._aliases = Aliases()
        self._line = 0

    def _run(self, op: dict[str, Any]) -> dict[str, Any]:
        self._line += 1
        return run_op(self.ledger, self._aliases, self._line, json.dumps(op))

    def write(self, op: dict[str, Any]) -> str | None:
        out = self._run(op)
        return None if out["ok"] else str(out["error"]["code"])

    def read(self, op: dict[str, Any]) -> list[Any]:
        out = self._run(op)
        if not out["ok"]:
            raise RuntimeError(f"read refused: {out['error']['message']}")
        return [f["value"] for f in out["result"]["facts"]
                if f["subject"] == op["subject"] and f["predicate"] == op["predicate"]]

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


class OverwriteMemory:
    """The reference point: one value per (subject, predicate), the last write wins, and a
    retraction, rejection or erasure deletes whatever is stored there. No time, no review."""

    name = "baseline"

    def __init__(self) -> None:
        self._values: dict[tuple[str, str], Any] = {}
        self._refs: dict[str, tuple[str, str]] = {}

    def reset(self) -> None:
        self._values.clear()
        self._refs.clear()

    def _key(self, ref: Any) -> tuple[str, str] | None:
        if isinstance(ref, str) and ref.startswith("@"):
            return self._refs.get(ref[1:])
        return None

    def write(self, op: dict[str, Any]) -> str | None:
        kind = op["op"]
        if kind == "assert":
            key = (op["subject"], op["predicate"])
            self._values[key] = op["value"]
            if isinstance(op.get("ref"), str):
                self._refs[op["ref"]] = key
        elif kind in ("retract", "reject", "forget"):
            target = self._key(op.get("fact_id"))
            if target is None:
                return "unknown_alias"
            self._values.pop(target, None)
        elif kind == "forget_subject":
            for key in [k for k in self._values if k[0] == op.get("subject")]:
                del self._values[key]
        return None

    def read(self, op: dict[str, Any]) -> list[Any]:
        key = (op["subject"], op["predicate"])
        return [self._values[key]] if key in self._values else []

    def close(self) -> None:
        self.reset()
