"""The ledger service: `Ledger`, the one façade the TUI, `--batch`, MCP and the Python API
share. Each command is validated, then handed to its handler (a write in `writes`, a read, an
erasure, evidence), which runs it through the core.

Owns: facade (its evidence methods in evidence_views), writes, corroborate, queries, browse
(the paged reads of the terminal app), readmodels (their pages). May import: every capability
below it (`domain`, `keys`, `recall`, `core`, `erasure`, `evidence`) and `store`; never
`interfaces`, `textual` or `mcp`.
"""
