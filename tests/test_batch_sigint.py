"""Issue 31: a streaming `--batch -` whose input stays open stops promptly on SIGINT: nothing
half-done is committed, the results of the committed ops are printed with a summary, and it
exits 130. A real process whose stdin is a pipe the test keeps open."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from custody_app import Ledger

CAUSE = {"kind": "tool", "ref": "r"}


def op(i: int) -> str:
    return json.dumps({"op": "assert", "subject": f"acct:{i}", "predicate": "plan", "value": "v",
                       "actor": "user:a", "cause": CAUSE}) + "\n"


class Running:
    """The batch process, its stdout and stderr read by threads, its stdin held open."""

    def __init__(self, db: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CUSTODY_")}
        subprocess.run([sys.executable, "-m", "custody_app", "init", "--ledger", str(db)],
                       env=env, check=True, capture_output=True, timeout=120)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "custody_app", "--batch", "-", "--ledger", str(db)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.out: list[str] = []
        self.err: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._threads = [threading.Thread(target=self._drain, args=(s, b), daemon=True)
                         for s, b in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for t in self._threads:
            t.start()

    @staticmethod
    def _drain(stream: Any, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def wait_for(self, lines: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.out) < lines:
            assert time.monotonic() < deadline and self.proc.poll() is None, self.err
            time.sleep(0.02)

    def interrupt(self, timeout: float = 20) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=timeout)  # stdin still open: no EOF helps it end
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail("the batch ignored SIGINT while its input stayed open")
        for t in self._threads:
            t.join(timeout=10)
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return code


def test_sigint_stops_an_idle_held_open_batch(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    run = Running(db)
    run.send(op(1) + op(2))
    run.wait_for(2)
    code = run.interrupt()
    err = "".join(run.err)
    assert code == 130, err
    assert "Traceback" not in err and "interrupted" in err
    assert "after 2 op(s)" in err and "2 ok and committed" in err, err
    printed = [json.loads(line) for line in run.out]
    assert [r["ok"] for r in printed] == [True, True]
    with Ledger.open(db, readonly=True) as led:
        assert led.verify().valid
        assert {f.subject for f in led.as_of(include="claimed").facts} == {"acct:1", "acct:2"}


def test_sigint_mid_stream_commits_only_whole_ops_and_reports_them(tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    run = Running(db)
    run.send("".join(op(i) for i in range(3000)))
    run.wait_for(1)
    code = run.interrupt()
    err = "".join(run.err)
    assert code == 130 and "Traceback" not in err, err
    printed = [json.loads(line) for line in run.out]
    assert all(r["ok"] for r in printed)
    with Ledger.open(db, readonly=True) as led:
        assert led.verify().valid
        stored = {f.subject for f in led.as_of(include="claimed", limit=10_000).facts}
    # Every printed result is committed, and nothing committed went unreported.
    assert stored == {f"acct:{r['line'] - 1}" for r in printed}
    assert f"after {len(printed)} op(s)" in err, err
