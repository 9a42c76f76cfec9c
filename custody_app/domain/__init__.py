"""The domain: what a fact, an event, a command, a policy and a read model are, and the pure
rules over them (the lifecycle's legal moves, the hash chain, the as-of fold, times, redaction,
retention windows).

Owns: models, commands, lifecycle, fold, chain, policy, receipts, timeutil, errors, redaction,
retention, readmodels, resources. May import: nothing else of the project (not `store`, not
another subpackage) and no `apsw`, `textual` or `mcp`. Rows from the store are read through the
protocols in `records`.
"""
