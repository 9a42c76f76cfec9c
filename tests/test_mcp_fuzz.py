"""A fixed-seed fuzz of the MCP server (issue 32), a few hundred messages each over stdio and
HTTP (bench/bench_fuzz.py runs 10,000 each): every request answered, no notification or
response answered, no crash, nothing stuck, no refused message that changed the ledger."""

from __future__ import annotations

from pathlib import Path

from bench.fuzz_mcp import mcp_requests
from bench.fuzz_mcp_http import mcp_http_requests
from tests.conftest import SUITE_DEFAULT_POLICY

CASES = 300
# Generous: a message stuck for this long is stuck, not slow on a loaded machine.
STUCK_S = 30.0


def test_mcp_stdio_fuzz_every_request_answered(tmp_path: Path) -> None:
    tally = mcp_requests(tmp_path, CASES, fuzz_seed=32, hang_s=STUCK_S,
                         policy=SUITE_DEFAULT_POLICY)
    assert tally.cases >= CASES
    assert (tally.unanswered, tally.crashes, tally.hangs, tally.changed) == (0, 0, 0, 0), \
        tally.examples
    assert "0 notifications or responses answered" in tally.extra, tally.examples


def test_mcp_http_fuzz_every_request_answered(tmp_path: Path) -> None:
    tally = mcp_http_requests(tmp_path, CASES, fuzz_seed=32, hang_s=STUCK_S,
                              policy=SUITE_DEFAULT_POLICY)
    assert tally.cases >= CASES
    assert (tally.unanswered, tally.crashes, tally.hangs, tally.changed) == (0, 0, 0, 0), \
        tally.examples
    assert "exit 0 on SIGTERM" in tally.extra
