"""`custody-app --batch`: JSON Lines in, one JSON result per op out (DESIGN sections 9 and 10)."""

from __future__ import annotations

import io
import json
import os
import queue
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, TextIO

from custody_app.domain.errors import LedgerError
from custody_app.domain.escaping import escape_text
from custody_app.keys.writer_keys import WriterKey
from custody_app.ledger.facade import Ledger
from custody_app.ledger.identity import bind_agent
from custody_app.ledger.ops import MAX_LINE_CHARS, Aliases, result_line, run_op

# Ops per write transaction: results are printed only once their transaction has committed.
CHUNK = 500
# Seconds without a new input line after which a held-open batch commits its open group.
PAUSE = 0.005


def bind_identity(ledger: Ledger, agent: str | None, key: WriterKey | None) -> None:
    """The batch process's one identity (DESIGN 14): with `agent`, that agent only (`--batch
    --agent NAME [--writer-key K]`: no other actor, no operator op, a registered name only with
    its key); without, the operator, who names any actor and, with `key`, writes as the actor
    the policy registers that key for."""
    if agent is not None:
        bind_agent(ledger, agent, key)
        return
    if key is None:
        return
    for actor in ledger.policy.policy.provenance.writer_keys:
        if ledger.present_writer_key(actor, key):
            return
    raise LedgerError("writer_key_unregistered", f"the policy in force registers the writer "
                      f"key given ({key.signer}) for no actor")


@dataclass
class BatchOutcome:
    ok: int = 0
    failed: int = 0
    first_failure: dict[str, Any] | None = None
    stopped: bool = False
    codes: Counter[str] = field(default_factory=Counter)  # failed ops reported, by error code

    def summary(self) -> str:
        """The one line on stderr that ends every run: ops, ok, failed by code."""
        failed = ", ".join(f"{code} {n}" for code, n in sorted(self.codes.items()))
        return (f"custody-app: batch: {self.ok + self.failed} op(s), {self.ok} ok, "
                f"{self.failed} failed" + (f" ({failed})" if failed else "")
                + (", stopped at the first failure" if self.stopped else ""))


def _bounded(stream: Iterable[str]) -> Iterator[tuple[str, bool]]:
    """(line, whole?) for each line, read at most MAX_LINE_CHARS + 1 characters far: the rest of
    a longer line is skipped a piece at a time, never held (one 100 MB line once took the
    process past 20 GB), and the part kept is refused by its length (`line_too_large`)."""
    if not isinstance(stream, io.TextIOWrapper):
        yield from ((text, True) for text in stream)  # already in memory (lines, a StringIO)
        return
    readline = stream.readline
    while text := readline(MAX_LINE_CHARS + 1):
        whole = len(text) <= MAX_LINE_CHARS or text.endswith("\n")
        rest = text
        while len(rest) > MAX_LINE_CHARS and not rest.endswith("\n"):
            rest = readline(MAX_LINE_CHARS + 1)
        yield text, whole


def _lines(stream: Iterable[str]) -> Iterator[tuple[int, str]]:
    for number, (text, whole) in enumerate(_bounded(stream), start=1):
        if not whole:
            if not text.lstrip().startswith("#"):  # a comment is skipped at any length
                yield number, text  # too long, stripped or not: refused whole, never run cut short
            continue
        stripped = text.strip()
        if stripped and not stripped.startswith("#"):
            yield number, stripped


_END = object()
# How often a runner waiting for input looks whether SIGINT asked it to stop (seconds).
POLL = 0.1


class Interrupt:
    """SIGINT during a run: noted by the handler and acted on at the next op boundary or while
    waiting for input, so no op is cut in half and every committed op's result is printed. A
    second SIGINT raises KeyboardInterrupt at once (the open transaction rolls back). Installed
    only on the main thread, and never over an ignored SIGINT (a background job's)."""

    def __init__(self) -> None:
        self.hit = False
        self._old: Any = None

    def __enter__(self) -> Interrupt:
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, None):
                self._old = signal.signal(signal.SIGINT, self._note)
        return self

    def _note(self, signum: int, frame: object) -> None:
        if self.hit:
            raise KeyboardInterrupt
        self.hit = True

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def _own_reader(stream: Iterable[str]) -> Iterable[str]:
    """A reader of the same input on a file descriptor of its own: the input thread blocks in
    it, never in the caller's stream, whose close (at the end of an interrupted run) would
    otherwise wait for that read to return, i.e. for input that may never come."""
    if not isinstance(stream, io.TextIOWrapper):
        return stream
    try:
        fd = os.dup(stream.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        return stream
    return open(fd, encoding=stream.encoding, errors=stream.errors)  # noqa: SIM115


class HeldOpen:
    """Input read by a thread of its own, so the runner can tell that input has paused (nothing
    read and waiting) and commit the open group then, rather than block inside a transaction
    while the script waits for its answer (DESIGN 13, "Batch answers")."""

    def __init__(self, stream: Iterable[str], stop: Interrupt | None = None) -> None:
        self._queue: queue.Queue[object] = queue.Queue(maxsize=4 * CHUNK)
        self._ahead: list[object] = []
        self._error: BaseException | None = None
        self._stop = stop
        self._thread = threading.Thread(target=self._read, args=(_own_reader(stream),),
                                        daemon=True, name="batch-input")
        self._thread.start()

    def _read(self, stream: Iterable[str]) -> None:
        try:
            for item in _lines(stream):
                self._queue.put(item)
        except BaseException as exc:  # re-raised in the runner's thread
            self._error = exc
        self._queue.put(_END)

    def paused(self) -> bool:
        """No line came within PAUSE seconds. The short wait keeps input that streams at full
        speed (a piped file) in big groups, where the reader thread lags the runner a little."""
        if not self._ahead:
            try:
                self._ahead.append(self._queue.get(timeout=PAUSE))
            except queue.Empty:
                return True
        return False

    def _next(self) -> object:
        while not self._ahead:
            if self._stop is not None and self._stop.hit:
                return _END
            try:
                return self._queue.get(timeout=POLL)
            except queue.Empty:
                continue
        return self._ahead.pop()

    def __iter__(self) -> Iterator[tuple[int, str]]:
        while (item := self._next()) is not _END:
            yield item  # type: ignore[misc]
        if self._error is not None:
            raise self._error


def _group_failed(pending: list[dict[str, Any]], exc: LedgerError, outcome: BatchOutcome,
                  fail_fast: bool) -> None:
    for result in pending:
        if result["ok"]:
            outcome.ok -= 1
            outcome.failed += 1
            result.pop("result", None)
            result.update(ok=False, error=exc.to_json())
            outcome.first_failure = outcome.first_failure or result
    outcome.stopped = outcome.stopped or (fail_fast and bool(pending))


# Erasure ops run in a transaction of their own, so their WAL checkpoint and byte scan see
# the erasure committed.
_STANDALONE = ("forget", "forget_subject", "sweep")


def _standalone(text: str) -> bool:
    """Is the line an erasure op? Only a line that names one can be (without a backslash,
    every string of a JSON line is in its text as it is): most lines are not parsed here."""
    if "\\" not in text and "forget" not in text and "sweep" not in text:
        return False
    return _op_name(text) in _STANDALONE


def _op_name(text: str) -> Any:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data.get("op") if isinstance(data, dict) else None


def _never() -> bool:
    return False


def _groups(lines: Iterator[tuple[int, str]], chunk: int, paused: Callable[[], bool] = _never
            ) -> Iterator[tuple[bool, list[tuple[int, str]]]]:
    """(shared transaction?, lines): up to `chunk` ops together, erasure ops alone; a group
    also ends where input pauses, so its results are not held back while the writer waits."""
    group: list[tuple[int, str]] = []
    for item in lines:
        if _standalone(item[1]):
            if group:
                yield True, group
                group = []
            yield False, [item]
            continue
        group.append(item)
        if len(group) >= chunk or paused():
            yield True, group
            group = []
    if group:
        yield True, group


def run_batch(ledger: Ledger, stream: Iterable[str], out: TextIO, *,
              fail_fast: bool = False, chunk: int = CHUNK, sign: bool = True,
              held_open: bool = False) -> BatchOutcome:
    """Run every op; groups of ops share a transaction, each op in its own savepoint. Results
    are printed once their transaction committed; with `held_open` (stdin) a group also
    commits whenever input pauses. A run that wrote ends with a signed checkpoint of the chain
    head (`sign`)."""
    with Interrupt() as stop:
        outcome = _run(ledger, stream, out, fail_fast, chunk, sign, held_open, stop)
    if stop.hit:
        done = outcome.ok + outcome.failed
        sys.stderr.write(f"custody-app: interrupted (SIGINT) after {done} op(s), their results "
                         f"printed above ({outcome.ok} ok and committed, {outcome.failed} "
                         "failed); no op after them ran\n")
        raise KeyboardInterrupt
    return outcome


def _run(ledger: Ledger, stream: Iterable[str], out: TextIO, fail_fast: bool, chunk: int,
         sign: bool, held_open: bool, stop: Interrupt) -> BatchOutcome:
    if held_open:
        source = HeldOpen(stream, stop)
        lines: Iterator[tuple[int, str]] = iter(source)
        paused: Callable[[], bool] = source.paused
    else:
        lines, paused = _lines(stream), _never
    ledger.db.limit_mmap(0)  # an ingest's RSS must not grow with the file (bench_memory.py)
    outcome = BatchOutcome()
    aliases = Aliases()
    pending: list[dict[str, Any]] = []
    head_before = ledger.db.events.head()
    try:
        for shared, group in _groups(lines, chunk, paused):
            saved = dict(aliases.names)
            entered = False
            try:
                with ledger.transaction() if shared else nullcontext():
                    entered = True
                    for number, text in group:
                        if stop.hit:
                            break  # the ops before it commit; this one and the rest never ran
                        result = run_op(ledger, aliases, number, text)
                        pending.append(result)
                        if result["ok"]:
                            outcome.ok += 1
                            continue
                        outcome.failed += 1
                        outcome.first_failure = outcome.first_failure or result
                        if fail_fast:
                            outcome.stopped = True
                            break
            except LedgerError as exc:
                aliases.names = saved
                if not entered:
                    raise
                # The group's transaction did not commit (e.g. disk_full): none of its ops stands.
                _group_failed(pending, exc, outcome, fail_fast)
            except BaseException:
                aliases.names = saved
                raise
            for result in pending:
                if not result["ok"]:
                    outcome.codes[str(result["error"]["code"])] += 1
                out.write(result_line(result))
            out.flush()
            pending.clear()
            if outcome.stopped or stop.hit:
                break
    except OSError:
        # The output failed (a reader that closed the pipe, a full disk): what committed
        # stays committed, and still ends with its signed checkpoint.
        _close_run(ledger, sign, head_before)
        raise
    _close_run(ledger, sign, head_before)
    if outcome.stopped and outcome.first_failure is not None:
        f = outcome.first_failure
        # The message may quote the input (an unknown field's name): escaped for the terminal.
        sys.stderr.write(escape_text(f"custody-app: stopped at line {f['line']} "
                                     f"({f['error']['code']}): {f['error']['message']}") + "\n")
    return outcome


def _close_run(ledger: Ledger, sign: bool, head_before: Any) -> None:
    """A run that wrote ends with a signed checkpoint over what it committed."""
    if sign and ledger.keys is not None and ledger.db.events.head() != head_before:
        try:
            ledger.checkpoint()
        except LedgerError as exc:  # e.g. disk_full: the ops' results above stand
            sys.stderr.write(f"custody-app: the closing signed checkpoint was not written: "
                             f"{exc.message} ({exc.code})\n")
