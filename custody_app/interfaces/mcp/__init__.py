"""The ledger as an MCP server: the memory tools (derived from the batch commands), the server
over stdio, and loopback HTTP behind a bearer token. The only package that imports the `mcp`
SDK; `custody-app serve` (interfaces/cli/serve.py) starts it.
"""
