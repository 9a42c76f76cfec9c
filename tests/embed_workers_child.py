"""Child of tests/test_pg_embed_workers.py: opens a ledger for writing under the shipped default
policy (minilm-l6) with its embedding worker held, says `ready`, starts the worker when told
(a line on stdin: every child starts at once), waits until no fact waits for a vector, and
prints what its worker did: `done <facts embedded> <vectors written>`."""

from __future__ import annotations

import sys

from custody_app.ledger.facade import Ledger
from custody_app.recall import embedding
from custody_app.recall.embedding import EmbeddingWorker


def main(address: str, batch: int) -> None:
    embedding.BATCH = batch
    start = EmbeddingWorker.start
    EmbeddingWorker.start = lambda self: None  # type: ignore[method-assign]
    with Ledger.open(address) as ledger:
        worker = ledger.index.embedding
        assert worker is not None
        print("ready", flush=True)
        sys.stdin.readline()
        start(worker)
        settled = ledger.index.settle_embedding(600)
        print(f"done {worker.computed} {worker.embedded} {int(settled)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
