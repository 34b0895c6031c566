"""The `spoolrender` command. The only place that configures logging.

- :mod:`.parser`: the arguments and the `--help` text of every command
- :mod:`.commands`: what each command does (thin: the work is in :mod:`spoolrender.api`)
- :mod:`.log_output`: log formats (text with spool text escaped, or JSON lines)
- :mod:`.exit_codes`: what the exit status says
- :mod:`.ops_commands`, :mod:`.listing`, :mod:`.failed_select`: list, retry of many, rerun
- :mod:`.status_text`: ``status``'s text (of the ``status --json`` document, :mod:`spoolrender.ops.status`)
- :mod:`.show_text`: ``show``'s text (of each job document, :mod:`spoolrender.ops.lookup`)
- :mod:`.text_parts`: what those and ``list`` share: ages, tables, a split job's chunk counts
- :mod:`.live_display`: ``run``'s live display on a terminal (rich)
- :mod:`.main`: parse, set up logging, run, map errors to exit statuses

All text for a person is formatted here, from the read models of :mod:`spoolrender.ops`
(dicts, dataclasses, the ``--json`` documents). May import every layer: it is the top one.
"""

from spoolrender.cli.main import main
from spoolrender.cli.parser import build_parser

__all__ = ["build_parser", "main"]
