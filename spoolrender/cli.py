"""The `spoolrender` command. The only place that configures logging."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from spoolrender import __version__
from spoolrender.config import CONFIG_KEYS, SpoolConfig, load_config
from spoolrender.errors import JobInvalid, SpoolrenderError

log = logging.getLogger("spoolrender")

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

DESCRIPTION = """\
Render Remotion videos from YAML job files dropped into a spool directory.

A spool has one directory per state:
  incoming/  jobs waiting (drop *.yaml files here, or use `spoolrender submit`)
  running/   jobs being rendered, each with a lock and a heartbeat
  retry/     jobs that failed transiently, waiting for their next attempt
  done/      finished jobs with result.json; the videos are under the output root
  failed/    jobs that failed for good, with failure.json saying why
"""

EPILOG = """\
examples:
  spoolrender init spool                    create a spool (and spool/spoolrender.yaml)
  spoolrender submit job.yaml               queue a job atomically
  spoolrender run                           render jobs as they arrive (Ctrl-C to stop)
  spoolrender run --drain                   render what is queued, then exit (for cron)
  spoolrender status                        what is queued, running, failed
  spoolrender retry --all-failed            give failed jobs fresh attempts

The spool is ./spool unless --spool or SPOOLRENDER_SPOOL says otherwise.
"""


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--spool", type=Path, default=None,
        help="spool directory (default: $SPOOLRENDER_SPOOL or ./spool)",
    )  # fmt: skip
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help=f"override a spool setting for this command (keys: {', '.join(CONFIG_KEYS)})",
    )  # fmt: skip
    p.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spoolrender", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"spoolrender {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    raw = argparse.RawDescriptionHelpFormatter

    p = sub.add_parser(
        "init", help="create a spool directory", formatter_class=raw,
        description="Create a spool (or complete a partial one). Existing jobs and config are kept.",
        epilog=textwrap.dedent("""\
            example:
              spoolrender init /srv/render/spool --group render
            Members of the group can then drop job files into incoming/ (setgid, sticky).
        """),
    )  # fmt: skip
    p.add_argument("path", nargs="?", type=Path, help="spool directory (default: --spool or ./spool)")
    p.add_argument("--group", help="group allowed to submit jobs (incoming/ becomes group-writable)")
    _add_common(p)

    p = sub.add_parser(
        "submit", help="queue a job file atomically", formatter_class=raw,
        description="Validate a job file and drop it into incoming/ (written under a hidden name, "
        "fsynced, then renamed: a runner never sees half a job).",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender submit intro.yaml
              generate-job | spoolrender submit - --name recap-42.yaml
        """),
    )  # fmt: skip
    p.add_argument("file", help="job file, or - for standard input")
    p.add_argument("--name", help="file name in incoming/ (default: the file's name; for stdin a unique one)")
    p.add_argument("--no-check", action="store_true", help="skip validation (the runner still validates)")
    _add_common(p)

    p = sub.add_parser(
        "run", help="render jobs from the spool", formatter_class=raw,
        description="Claim and render jobs. Without --drain it runs until SIGTERM/SIGINT: the first "
        "signal stops claiming and lets running jobs finish (grace_seconds), then puts them back "
        "into retry/ without using an attempt; a second signal cancels at once.",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender run                         long-running (systemd)
              spoolrender run --drain                 cron: render what is queued, then exit
              spoolrender run --slots 2 --set lease_seconds=120
            Several runners, on one host or on many sharing the spool, are safe together.
        """),
    )  # fmt: skip
    p.add_argument("--drain", action="store_true", help="exit once nothing is claimable (for cron)")
    p.add_argument("--slots", type=int, help="jobs at once (default: from cores and free memory)")
    p.add_argument("--output-root", type=Path, help="where outputs go (default: output_root setting)")
    p.add_argument("--watch", choices=("auto", "inotify", "polling"), help="how to notice new jobs")
    _add_common(p)

    p = sub.add_parser(
        "status", help="show the spool at a glance", formatter_class=raw,
        description="Counts per state, running jobs (host, pid, progress, heartbeat age, STALE when "
        "past the lease), the retry queue, recent failures and the runners seen.",
        epilog="example:\n  spoolrender status --json | jq .counts\n",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="machine-readable output (see README for the schema)")
    _add_common(p)

    p = sub.add_parser(
        "retry", help="give failed jobs fresh attempts", formatter_class=raw,
        description="Move failed jobs back to retry/, due now, with their attempt count reset.",
        epilog="examples:\n  spoolrender retry intro-42\n  spoolrender retry --all-failed\n",
    )  # fmt: skip
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("id", nargs="?", help="job id")
    group.add_argument("--all-failed", action="store_true", help="every job in failed/")
    _add_common(p)
    return parser


def _setup_logging(args: argparse.Namespace) -> None:
    level = logging.WARNING if args.quiet else (logging.INFO if args.verbose < 2 else logging.DEBUG)
    if args.command in ("status", "submit", "retry", "init") and not args.verbose:
        level = logging.WARNING
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )  # fmt: skip
    logging.getLogger("watchdog.observers.inotify").addFilter(_WatchdogStopNoise())


class _WatchdogStopNoise(logging.Filter):
    # watchdog 7 logs this at ERROR when its emitter thread is stopped while blocked in
    # a read: a harmless race of observer.stop(), not a lost event (listings are the truth).
    def filter(self, record: logging.LogRecord) -> bool:
        return "called when the thread is inactive" not in record.getMessage()


def _spool_path(args: argparse.Namespace) -> Path:
    if getattr(args, "path", None) is not None:
        return Path(args.path)
    if args.spool is not None:
        return Path(args.spool)
    return Path(os.environ.get("SPOOLRENDER_SPOOL", "spool"))


def _config(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> SpoolConfig:
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SpoolrenderError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value
    overrides.update({k: v for k, v in (extra or {}).items() if v is not None})
    return load_config(_spool_path(args), overrides=overrides)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args)
    try:
        return _dispatch(args)
    except JobInvalid as exc:
        print("job is invalid:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_ERROR
    except SpoolrenderError as exc:
        print(f"spoolrender: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "init":
        from spoolrender.layout import init_spool

        layout = init_spool(_spool_path(args), group=args.group)
        print(f"spool ready at {layout.root}")
        return EXIT_OK
    if args.command == "submit":
        from spoolrender.control import read_submission, submit

        data, name = read_submission(args.file, args.name)
        path = submit(_config(args), data, name, check=not args.no_check)
        print(path)
        return EXIT_OK
    if args.command == "run":
        from spoolrender.runner import Runner

        config = _config(args, {"slots": args.slots, "output_root": args.output_root, "watch": args.watch})
        runner = Runner(config, drain=args.drain)
        runner.install_signal_handlers()
        summary = runner.run()
        if args.drain:
            print(
                f"drained: {summary.done} done, {summary.retried} to retry, {summary.failed} failed"
                f" (outputs under {config.output_root})"
            )
        return EXIT_OK
    if args.command == "status":
        from spoolrender.status import collect_status, format_status

        status = collect_status(_config(args))
        print(json.dumps(status, indent=2, sort_keys=True) if args.json else format_status(status))
        return EXIT_OK
    if args.command == "retry":
        from spoolrender.control import retry_failed

        moved = retry_failed(_config(args), None if args.all_failed else args.id)
        print(f"{len(moved)} job(s) sent back to retry/: {', '.join(moved) or '-'}")
        return EXIT_OK
    raise AssertionError(args.command)  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
