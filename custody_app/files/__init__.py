"""Files the program writes or reads on a user's say-so: the one output-file helper every
command that writes a file goes through, and the check that an input path is a regular file.

Owns: output (writing outputs, checking input paths). May import: `domain`, and
`store.address` (which files are a ledger's own). Below `keys` (writer keys and the public key
are written through it) and above the pure domain, because it
does file I/O.
"""
