"""`custody-app`: the console script (`main`), its shared options and exit codes (`common`),
and the subcommands grouped by what they do. Subcommands with parsers of their own (`doctor`,
`eval`, `serve`, `writer-key`) are imported only when run.
"""
