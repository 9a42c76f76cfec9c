"""Erasure: forget, forget_subject and retention sweeps, their cascade to derived facts, the
proof that runs after each erasure (places checked, byte scans), its certificate, and the
scrubs a reader left pending.

Owns: forget, sweep, cascade, proof, certificate, scrubs. May import: `domain`, `keys`,
`recall`, `core` and `store`. Appends through the core's public API only.
"""
