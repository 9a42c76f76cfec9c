"""`custody-app`: the console script (`main`), its shared options and output (`common`), and
the subcommands grouped by what they do (`ledger`, `erasure`, `evidence`). `serve` and
`writer-key` (`serve`), `doctor` and `eval` have parsers of their own and are imported only when
run, so `--batch` and `serve` never load the terminal app.
"""
