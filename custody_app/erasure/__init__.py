"""Erasure: forget, forget_subject and retention sweeps, their cascade to derived facts, the
proof that runs after each erasure (places checked, byte scans), its certificate, and the
scrubs a reader left pending (or a kill: the file rewrite after residue is recorded as due
first, `rewrites`; an erasure another process left pending is finished by `completion`).

Owns: forget, sweep, cascade, proof, certificate, scrubs. May import: `domain`, `keys`,
`recall`, `core` and `store`. Appends through the core's public API only.
"""
