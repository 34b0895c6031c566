"""`spoolrender`'s entry point: parse, set up logging, run the command, map errors to exit statuses."""

from __future__ import annotations

import sys

from spoolrender.cli.commands import dispatch, print_problems, silence_stdout
from spoolrender.cli.exit_codes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from spoolrender.cli.log_output import setup_logging
from spoolrender.cli.parser import build_parser, unknown_command
from spoolrender.core.safe_text import printable
from spoolrender.errors import JobInvalid, SpoolrenderError


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    unknown = unknown_command(parser, sys.argv[1:] if argv is None else argv)
    if unknown is not None:
        parser.print_usage(sys.stderr)
        print(f"spoolrender: error: {printable(unknown)}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    setup_logging(args)
    try:
        return dispatch(args)
    except JobInvalid as exc:
        print_problems("job is invalid:", exc.problems)
        return EXIT_ERROR
    except SpoolrenderError as exc:
        print(f"spoolrender: {printable(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader went away (`status --watch | head`): nothing left to say to anyone.
        silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        # Ctrl-C in a short command (a slow `show`, `submit -` waiting for its input):
        # a person asked to stop; a traceback would only hide that.
        return EXIT_INTERRUPTED
