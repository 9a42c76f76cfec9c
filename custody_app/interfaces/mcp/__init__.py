"""The ledger as an MCP server: the memory tools (derived from the batch commands), the server
over stdio, loopback HTTP behind a bearer token, and the `serve` and `writer-key` subcommands.
The only package that imports the `mcp` SDK.
"""
