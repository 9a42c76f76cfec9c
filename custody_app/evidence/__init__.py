"""Evidence: what relied on a belief and what leaves the ledger to be checked elsewhere:
actions, blast radius and explain, signed checkpoints, evidence packs, exports, the offline
checks of packs and exports, and `verify` of the chain.

Owns: blast, readmodels (blast radius and explain), explain (the ten answers), actionpack,
actions (search), receipts (verify's receipt check), output (safe output files), checkpoints,
packs, export, offline, packcheck, verify.
May import: `domain`, `keys`, `recall`, `core`, `erasure` and `store`.
"""
