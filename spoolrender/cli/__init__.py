"""The `spoolrender` command. The only place that configures logging.

- :mod:`.parser`: the arguments and the `--help` text of every command
- :mod:`.commands`: what each command does (thin: the work is in :mod:`spoolrender.api`)
- :mod:`.log_output`: log formats (text with spool text escaped, or JSON lines)
- :mod:`.exit_codes`: what the exit status says
- :mod:`.ops_commands`, :mod:`.listing`, :mod:`.failed_select`: list, retry of many, rerun
- :mod:`.live_display`: ``run``'s live display on a terminal (rich)
- :mod:`.main`: parse, set up logging, run, map errors to exit statuses

Text for a person is formatted here, except ``status``'s and ``show``'s, still made next to
their read models (:func:`spoolrender.ops.status.format_status`,
:func:`spoolrender.ops.lookup.format_description`). May import every layer: it is the top one.
"""

from spoolrender.cli.main import main
from spoolrender.cli.parser import build_parser

__all__ = ["build_parser", "main"]
