"""Child of tests/test_embedding_kill.py (and bench/bench_embed_kill.py): writes facts through
the API under the shipped default policy (minilm-l6, the background worker embedding beside
the writes), printing each fact's id once its write returned, until SIGKILLed."""

from __future__ import annotations

import sys
import time

from custody_app.ledger.facade import Ledger

CAUSE = {"kind": "message", "ref": "msg-1"}
TOPICS = ["adopted a beagle puppy", "invoice sent to Acme Logistics", "sister teaches piano",
          "allergic to peanuts", "standup moved to Tuesdays", "car needs winter tyres"]


def main(path: str, start: int, count: int) -> None:
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
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
