"""`custody-app --batch`: JSON Lines in, one JSON result per op out (DESIGN sections 9 and 10)."""

from __future__ import annotations

import io
import json
import queue
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, TextIO

from custody_app.domain.errors import LedgerError
from custody_app.ledger.facade import Ledger
from custody_app.ledger.ops import MAX_LINE_CHARS, Aliases, result_line, run_op

# Ops per write transaction: results are printed only once their transaction has committed.
CHUNK = 500
# Seconds without a new input line after which a held-open batch commits its open group.
PAUSE = 0.005


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


class HeldOpen:
    """Input read by a thread of its own, so the runner can tell that input has paused (nothing
    read and waiting) and commit the open group then, rather than block inside a transaction
    while the script waits for its answer (DESIGN 13, "Batch answers")."""

    def __init__(self, stream: Iterable[str]) -> None:
        self._queue: queue.Queue[object] = queue.Queue(maxsize=4 * CHUNK)
        self._ahead: list[object] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True,
                                        name="batch-input")
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

    def __iter__(self) -> Iterator[tuple[int, str]]:
        while (item := self._ahead.pop() if self._ahead else self._queue.get()) is not _END:
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
        if _op_name(item[1]) in _STANDALONE:
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
    if held_open:
        source = HeldOpen(stream)
        lines: Iterator[tuple[int, str]] = iter(source)
        paused: Callable[[], bool] = source.paused
    else:
        lines, paused = _lines(stream), _never
    ledger.db.limit_mmap(0)  # an ingest's RSS must not grow with the file (bench_memory.py)
    outcome = BatchOutcome()
    aliases = Aliases()
    pending: list[dict[str, Any]] = []
    head_before = ledger.db.events.head()
    for shared, group in _groups(lines, chunk, paused):
        saved = dict(aliases.names)
        entered = False
        try:
            with ledger.transaction() if shared else nullcontext():
                entered = True
                for number, text in group:
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
        if outcome.stopped:
            break
    if sign and ledger.keys is not None and ledger.db.events.head() != head_before:
        try:
            ledger.checkpoint()
        except LedgerError as exc:  # e.g. disk_full: the ops' results above stand
            sys.stderr.write(f"custody-app: the closing signed checkpoint was not written: "
                             f"{exc.message} ({exc.code})\n")
    if outcome.stopped and outcome.first_failure is not None:
        f = outcome.first_failure
        sys.stderr.write(f"custody-app: stopped at line {f['line']} ({f['error']['code']}): "
                         f"{f['error']['message']}\n")
    return outcome
