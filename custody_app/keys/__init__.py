"""Keys and cryptography: the key ring over the key store (per-subject data keys with the shred
fence, the forget key, the pepper, the ledger's signing key), sealing values at rest, and the
writer keys that vouch for a writer.

Owns: crypto, keyring, values, writer_keys, receipts (tool receipt keys, signing, checks).
May import: `files`, `domain` and `store` (the key store
file). Below the core, because every write seals its value; erasure destroys keys through it.
"""
