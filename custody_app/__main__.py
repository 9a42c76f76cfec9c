"""`python -m custody_app` runs the console script."""

import sys

from custody_app.interfaces.cli.main import main

sys.exit(main())
