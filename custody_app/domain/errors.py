"""Typed refusals: each carries a stable code that the batch output and the CLI report; the
process exit codes every subcommand shares, and the argument parser that keeps them."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterable
from enum import IntEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import SupportsWrite


class Exit(IntEnum):
    """How `custody-app` (and `--batch`, `doctor`, `serve`) exits."""

    OK = 0
    OP_FAILED = 1
    USAGE = 2
    UNOPENABLE = 3
    OUTPUT_CLOSED = 4
    """stdout was closed (`| head`) or full: the output is lost; what was written stays written."""
    INTERRUPTED = 130
    """Interrupted (Ctrl-C, SIGINT): what was committed (and its results printed) stands, the
    group of ops under way was rolled back; 128 + SIGINT, as shells report it."""


class LedgerError(Exception):
    """A refused operation. `code` is stable; `message` is one plain sentence; nothing was written."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}


class PolicyError(LedgerError):
    """A policy file that cannot be used; the message names the file, the key and the reason."""

    def __init__(self, message: str, *, file: str, key: str | None = None) -> None:
        super().__init__("policy_invalid", message, file=file, key=key)


def suggest(given: object, known: Iterable[str]) -> str:
    """`; did you mean 'x'?` for the known name closest to `given`, or "" when none is close."""
    if not isinstance(given, str):
        return ""
    # Never the name given itself: known somewhere, it was still refused here.
    close = difflib.get_close_matches(given, [k for k in known if k != given], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


class Parser(argparse.ArgumentParser):
    """argparse, except that help, usage or version text that cannot be written to stdout (a
    closed pipe, a full disk) raises instead of being dropped, so the console script ends with
    Exit.OUTPUT_CLOSED as every other command does, not 0 as if the text had been read."""

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        if not message:
            return
        stdout = sys.stdout
        if file is not None and id(file) == id(stdout):
            stdout.write(message)  # argparse itself would swallow an OSError here
            stdout.flush()
            return
        try:
            (file or sys.stderr).write(message)
        except (AttributeError, OSError):
            pass  # a usage diagnostic lost on a closed stderr is no lost output
