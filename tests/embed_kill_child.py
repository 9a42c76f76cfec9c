"""Child of tests/test_embedding_kill.py (and bench/bench_embed_kill.py): writes facts through
the API under the shipped default policy (minilm-l6, the background worker embedding beside
the writes), printing each fact's id once its write returned, until SIGKILLed. With `hold`, the
worker's first write of vectors stops inside its transaction, its rows sent to the ledger
(`in-write` is printed then): the kill lands with the transaction half done."""

from __future__ import annotations

import sys
import time
from typing import Any

from custody_app.ledger.facade import Ledger
from store.postgres.recall import RecallStore as ServerRecall
from store.sqlite.recall import RecallStore as FileRecall

CAUSE = {"kind": "message", "ref": "msg-1"}
TOPICS = ["adopted a beagle puppy", "invoice sent to Acme Logistics", "sister teaches piano",
          "allergic to peanuts", "standup moved to Tuesdays", "car needs winter tyres"]


def hold_inside_the_workers_write() -> None:
    """The worker's add of vectors (no lexical rows: the writes add those) runs, its rows
    reach the ledger (a read sends what a server connection queued), and it never returns."""
    for store in (ServerRecall, FileRecall):
        add_many = store.add_many

        def held(self: Any, lexical: list[Any], vectors: list[Any],
                 add_many: Any = add_many) -> tuple[str, str]:
            tokens: tuple[str, str] = add_many(self, lexical, vectors)
            if vectors and not lexical:
                self.vector_count()
                print("in-write", flush=True)
                time.sleep(600)
            return tokens

        store.add_many = held  # type: ignore[method-assign]


def main(path: str, start: int, count: int, hold: bool) -> None:
    if hold:
        hold_inside_the_workers_write()
    with Ledger.open(path) as ledger:
        print("ready", flush=True)
        for n in range(start, start + count):
            fact = ledger.assert_fact(f"user:{n}", "note", f"{TOPICS[n % len(TOPICS)]} {n}",
                                      actor="agent:support", cause=CAUSE, provenance="attested")
            print(f"{n} {fact.fact_id}", flush=True)
            if n % 10 == 9:
                time.sleep(0.03)  # the worker embeds beside the writes
        print("written", flush=True)
        ledger.index.settle_embedding()
        print("embedded", flush=True)
        time.sleep(60)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:] == ["hold"])
