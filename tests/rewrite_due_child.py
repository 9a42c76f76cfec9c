"""A child for the rewrite-due trials: one erasure of a subject, or one read-write open.

    python tests/rewrite_due_child.py forget LEDGER POLICY SUBJECT
    python tests/rewrite_due_child.py open LEDGER POLICY

`forget` prints `done COMPLETE REWRITTEN` when forget_subject returned ($CUSTODY_FAULT may kill
it on the way); `open` prints the JSON of each certificate the open finished."""

from __future__ import annotations

import sys

from custody_app.ledger.facade import Ledger


def main(action: str, path: str, policy: str, *rest: str) -> None:
    ledger = Ledger.open(path, policy=policy)
    try:
        if action == "forget":
            cert = ledger.forget_subject(rest[0], actor="user:dpo",
                                         reason="subject_request").certificate
            print("done", cert.complete, cert.rewritten, flush=True)
        else:
            for cert in ledger.finished_at_open:
                print(cert.model_dump_json(), flush=True)
    finally:
        ledger.index.settle()
        ledger.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
