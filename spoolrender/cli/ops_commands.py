"""The operator's commands over many jobs: `list`, `retry` (one id, or chosen failed jobs) and `rerun`."""

from __future__ import annotations

import argparse
import sys

from spoolrender.cli.exit_codes import EXIT_OK
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.safe_text import printable
from spoolrender.errors import SpoolrenderError


def list_command(config: SpoolConfig, args: argparse.Namespace) -> int:
    from spoolrender.cli.listing import print_list

    print_list(config, args)
    return EXIT_OK


def retry_command(config: SpoolConfig, args: argparse.Namespace) -> int:
    """`retry ID`, or `retry --all-failed/--kind/--queue` over the failed jobs they choose."""
    from spoolrender.ops import control

    kinds = tuple(args.kind or ())
    many = args.all_failed or bool(kinds) or args.queue is not None
    if args.id is not None and many:
        raise SpoolrenderError("retry takes a job id or --all-failed/--kind/--queue, not both")
    if args.id is None and not many:
        raise SpoolrenderError("retry needs a job id, or --all-failed (--kind K, --queue Q to choose among them)")
    if args.include_hopeless and not many:
        raise SpoolrenderError("--include-hopeless is for --all-failed, --kind or --queue")
    if args.id is not None:
        if args.dry_run:
            return _retry_one_dry_run(config, args.id)
        for change in control.retry(config, args.id):
            print(printable(change.text))
        return EXIT_OK
    from spoolrender.cli.failed_select import select_failed

    selection = select_failed(config, kinds=kinds, queue=args.queue, include_hopeless=args.include_hopeless)
    verb = "would send back" if args.dry_run else "sent back"
    if args.dry_run:
        for entry in selection.chosen:
            print(printable(f"failed/{entry.name}  {entry.kind or '?'}"))
        names = [e.job_id for e in selection.chosen]
    else:
        changes = control.retry_entries(config, [e.name for e in selection.chosen])
        names = [c.entry.removeprefix("failed/").rsplit(".", 1)[0] for c in changes]
    print(printable(f"{verb} {len(names)} job(s) to retry/: {', '.join(names) or '-'}"))
    if selection.hopeless:
        kinds_left = sorted({e.kind or "?" for e in selection.hopeless})
        print(
            printable(f"left out {len(selection.hopeless)} job(s) of hopeless kinds ({', '.join(kinds_left)}): "
                      "they fail the same way unless something changed; --include-hopeless or --kind KIND "
                      "to retry them"),
            file=sys.stderr,
        )  # fmt: skip
    return EXIT_OK


def _retry_one_dry_run(config: SpoolConfig, job_id: str) -> int:
    from spoolrender.errors import JobNotFound
    from spoolrender.ops.id_hints import id_hint
    from spoolrender.ops.lookup import find_job

    found = find_job(config, job_id, incoming=False)
    if not found:
        raise JobNotFound(job_id, f"no job with id {job_id!r}{id_hint(config.spool, job_id)}")
    movable = [w for w in found if w.state in ("failed", "retry")]
    for where in movable:
        what = "back to retry/ with fresh attempts" if where.state == "failed" else "made due now, attempts kept"
        print(printable(f"{where.entry}: would be {what} (never before its not_before)"))
    if not movable:
        states = ", ".join(sorted({w.state for w in found}))
        raise SpoolrenderError(f"job {job_id!r} is {states}: nothing to retry (only failed or retry-waiting jobs)")
    return EXIT_OK


def rerun_command(config: SpoolConfig, args: argparse.Namespace) -> int:
    from spoolrender.ops import rerun_done as rerun

    if args.dry_run:
        plan = rerun.plan_rerun(config, args.id)
        print(printable(f"# would queue incoming/{plan.name}, from {plan.source}"))
        # The done job's file is the submitter's bytes: shown escaped, line by line.
        for line in plan.data.decode("utf-8", errors="replace").splitlines():
            print(printable(line))
        return EXIT_OK
    path = rerun.rerun(config, args.id)
    print(printable(f"{path}: a new run of {args.id}; its done entry and published output stay until "
                    "the new run's output is published"))  # fmt: skip
    return EXIT_OK
