"""The ledger core: a ledger file opened under a policy, its write transactions, and the one
append that every event goes through (validate, hash, store, index the session, project, update
the recall indexes), plus the read-side views (history, why) and the projection rebuild.

Owns: ledger_core (`LedgerCore` and its small public API: `transaction()`, `append()`,
`tx_at()`, `now()`, `new_fact_id()`, `serve()`), projector, sessions, reads. May import:
`domain`, `keys`, `recall` and `store`.
"""
