"""`python -m spoolrender.cli`: the same as the `spoolrender` command."""

import sys

from spoolrender.cli.main import main

sys.exit(main())
