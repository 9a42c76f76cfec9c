"""The ways in: the console script and its subcommands (`cli`), the batch protocol (`batch`),
the MCP server and its tools (`mcp`), and the Textual app with its access layer (`tui`).

The only subpackage that may import `textual` (only `tui`, and `screens` through it) or `mcp`
(only `mcp`). May import every other subpackage of `custody_app`; nothing imports it.
"""
