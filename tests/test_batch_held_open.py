"""`custody-app --batch -` held open by a script: each answer arrives before the next line is
written, and the run still ends with a signed checkpoint (DESIGN 13, "Batch answers")."""

from __future__ import annotations

import io
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

from custody_app import Ledger
from custody_app.interfaces.batch import run_batch

CAUSE = {"kind": "message", "ref": "msg_held_1"}
WAIT = 60.0  # seconds a held-open answer may take on a loaded machine before the test fails


def _op(n: int, **fields: Any) -> str:
    return json.dumps({"id": f"op{n}", **fields}) + "\n"


def _assert(n: int, value: str) -> str:
    return _op(n, op="assert", subject="acct:7", predicate=f"note{n}", value=value,
               actor="agent:bot", cause=CAUSE, provenance="attested")


class Answers:
    """stdout of the child read by a thread, so a missing answer is a timeout, not a hang."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line)

    def next(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.lines.get(timeout=WAIT)))
        except queue.Empty:
            raise AssertionError("no answer while the batch input was held open") from None


def test_each_answer_arrives_before_the_next_line_is_written(tmp_path: Path) -> None:
    ledger = tmp_path / "held.db"
    env = {k: v for k, v in os.environ.items() if k not in ("CUSTODY_LEDGER", "CUSTODY_POLICY")}
    child = subprocess.Popen([sys.executable, "-m", "custody_app", "--create", "--batch", "-", "--ledger",
                              str(ledger)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    assert child.stdin is not None and child.stdout is not None
    answers = Answers(child.stdout)
    try:
        child.stdin.write(_assert(1, "first"))
        child.stdin.flush()
        first = answers.next()
        assert first["ok"] is True and first["id"] == "op1"
        fact = first["result"]["fact_id"]
        # The answer says it is committed: another process already reads it, the batch still open.
        with Ledger.open(ledger, readonly=True) as reader:
            assert [f.fact_id for f in reader.as_of(subject="acct:7").facts] == [fact]
        child.stdin.write("# a comment gets no answer\n\n")
        child.stdin.write(_op(2, op="history", fact_id=fact))
        child.stdin.flush()
        second = answers.next()
        assert second["id"] == "op2" and second["line"] == 4
        assert second["result"]["fact_id"] == fact
        child.stdin.write(_op(3, op="retract", fact_id=fact, actor="agent:bot", reason="wrong"))
        child.stdin.flush()
        third = answers.next()
        assert third["ok"] is True and third["result"]["status"] == "retracted"
        child.stdin.write(_op(4, op="asert"))
        child.stdin.flush()
        assert answers.next()["error"]["code"] == "unknown_op"
        assert child.poll() is None  # still held open after all four answers
        child.stdin.close()
        assert child.wait(timeout=WAIT) == 1  # one op failed
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with Ledger.open(ledger, readonly=True) as reader:
        kinds = [e["kind"] for e in reader.history(fact).model_dump()["events"]]
        report = reader.verify()
        last = reader.event_at(report.events)
    assert kinds == ["assert", "retract"]
    assert report.valid
    # The run wrote, so it ended with a signed checkpoint: the last event of the chain.
    assert last is not None and last.kind == "checkpoint"


class _Slow(io.StringIO):
    """Input that pauses before its second line, as a script waiting for an answer does."""

    def __init__(self, text: str, gate: threading.Event, out: io.StringIO) -> None:
        super().__init__(text)
        self.gate, self.out = gate, out
        self.seen_before_pause = ""

    def __iter__(self) -> Any:
        lines = self.getvalue().splitlines(keepends=True)
        yield lines[0]
        assert self.gate.wait(WAIT)
        self.seen_before_pause = self.out.getvalue()
        yield from lines[1:]


def test_run_batch_flushes_the_open_group_when_input_pauses(tmp_path: Path) -> None:
    out = io.StringIO()
    gate = threading.Event()
    stream = _Slow(_assert(1, "a") + _assert(2, "b"), gate, out)
    with Ledger.open(tmp_path / "p.db") as ledger:
        worker = threading.Thread(target=lambda: run_batch(ledger, stream, out, held_open=True))
        worker.start()
        for _ in range(600):
            if out.getvalue():
                break
            threading.Event().wait(0.1)
        gate.set()
        worker.join(WAIT)
    assert json.loads(stream.seen_before_pause)["id"] == "op1"
    assert [json.loads(line)["id"] for line in out.getvalue().splitlines()] == ["op1", "op2"]


def test_a_file_batch_still_shares_one_transaction_per_group(tmp_path: Path) -> None:
    """Without held_open the first result waits for its group (throughput unchanged)."""
    out = io.StringIO()
    gate = threading.Event()
    stream = _Slow(_assert(1, "a") + _assert(2, "b"), gate, out)
    gate.set()
    with Ledger.open(tmp_path / "f.db") as ledger:
        run_batch(ledger, stream, out)
    assert stream.seen_before_pause == ""
    assert len(out.getvalue().splitlines()) == 2
