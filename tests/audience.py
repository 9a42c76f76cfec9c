"""Receipts in tests are signed for the ledger they are cited in (DESIGN 14: a receipt that
names no `audience` is refused). A module whose receipt helpers build receipts before they know
the env overrides `make_env` with `recording(...)`; `audience()` is then the id of the ledger
the test made last."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import Env

_LAST: list[str | None] = [None]


def audience() -> str | None:
    """The id of the ledger the running test made last (None before it made one)."""
    return _LAST[0]


def recording(make_env: Callable[..., Env]) -> Callable[..., Env]:
    """`make_env`, remembering each new ledger's id as the audience of the receipts after it."""
    _LAST[0] = None

    def make(*args: Any, **kwargs: Any) -> Env:
        env = make_env(*args, **kwargs)
        _LAST[0] = env.ledger.ledger_id
        return env

    return make
