"""`python -m custody_app` runs the console script."""

import sys

from custody_app.cli import main

sys.exit(main())
