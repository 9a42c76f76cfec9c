"""`custody-app doctor`: checks an install and a ledger, read-only, one verdict per check, and
its subcommand. May import: `domain`, `keys` and `store`.
"""

from custody_app.doctor.checks import diagnose

__all__ = ["diagnose"]
