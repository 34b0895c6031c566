"""The `spoolrender` command. The only place that configures logging.

- :mod:`.parser`: the arguments and the `--help` text of every command
- :mod:`.commands`: what each command does (thin: the work is in :mod:`spoolrender.api`)
- :mod:`.log_output`: log formats (text with spool text escaped, or JSON lines)
- :mod:`.exit_codes`: what the exit status says
"""

from spoolrender.cli.main import main
from spoolrender.cli.parser import build_parser

__all__ = ["build_parser", "main"]
