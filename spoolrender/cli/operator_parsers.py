"""The arguments and `--help` text of the operator's commands: ``status``, ``show``, ``list``,
``cancel``, ``retry``, ``rerun``, ``pause``, ``resume``, ``unblock`` and ``purge``.

Separate from cli/parser.py (the top level and the commands that make a spool, queue
jobs and render or serve them) because these read or change jobs already in the spool,
through ops/ (cli/commands.py, cli/ops_commands.py), and are the half of the command line
an operator reads; what they share with the others is cli/arguments.py.
"""

from __future__ import annotations

import textwrap

from spoolrender.cli.arguments import (
    RAW,
    Subparsers,
    add_common,
    age,
    duration,
    non_negative_int,
    positive_int,
    watch_interval,
)


def add_status_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "status", help="show the spool at a glance", formatter_class=RAW,
        description="Counts per state, the age of the oldest waiting job, running jobs (host, pid, progress, "
        "ETA, heartbeat age, STALE when past the lease), the retry queue with due times, recent failures "
        "with their reason, and the runners seen. Jobs rendered in chunks show once, under SPLIT, with "
        "their chunks done/running/waiting, progress and ETA. Counts come from directory listings only, "
        "so it stays fast on a spool with 100k finished jobs.",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender status
              spoolrender status --watch 2              refresh every 2 s (Ctrl-C to leave)
              spoolrender status --watch 1m             every minute (at least 0.1 s)
              spoolrender status --json | jq .counts    schema: docs/operations.md, "status --json"
              spoolrender status --prometheus > /var/lib/prometheus/node-exporter/spool.prom.tmp
        """),
    )  # fmt: skip
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="machine-readable output (stable schema: docs/operations.md)")
    fmt.add_argument("--prometheus", action="store_true", help="the spool gauges in Prometheus text format")
    p.add_argument(
        "--watch", nargs="?", type=watch_interval, const=2.0, metavar="SECONDS",
        help="refresh in place every SECONDS (default 2; at least 0.1; 2m works too)",
    )  # fmt: skip
    add_common(p)


def add_show_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "show", help="one job: state, attempts, errors, logs", formatter_class=RAW,
        description="Find a job by id in every state and show its state, attempts, each run's outcome and "
        "error, its result or failure, and the paths of its render logs. --json prints one object: the "
        "current entry, with `entries` (every entry of the id) and `others` (the other entries described).",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender show intro-42                each run with its start, end and duration (UTC)
              spoolrender show intro-42 --json | jq .due          a waiting retry's next attempt
              spoolrender show intro-42 --json | jq .eta_seconds  a running job's time left
              spoolrender show intro                   no such id: "did you mean 'intro-42'?"
            attempts counts the attempt being rendered, so a job on its 2nd try says 2.
        """),
    )  # fmt: skip
    p.add_argument("id", help="job id")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_common(p)


def add_cancel_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "cancel", help="cancel a queued or running job", formatter_class=RAW,
        description="A waiting job (incoming/ or retry/) is moved to failed/ as cancelled at once. A running "
        "job is stopped by the runner that owns it, on whichever host, at its next heartbeat "
        "(heartbeat_seconds), then failed as cancelled. A job rendered in chunks is cancelled whole: its "
        "running chunks are stopped the same way and its chunk files removed.",
        epilog="example:\n  spoolrender cancel intro-42\n",
    )  # fmt: skip
    p.add_argument("id", help="job id")
    add_common(p)


def add_pause_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "pause", help="stop claiming on every host", formatter_class=RAW,
        description="Write a spool-wide pause marker: no runner on any host claims new jobs while it exists. "
        "Running jobs go on. `run --drain` on a paused spool exits 4 at once.",
        epilog='example:\n  spoolrender pause --reason "disk maintenance"\n',
    )  # fmt: skip
    p.add_argument("--reason", default="paused by operator", help="shown by status and logs")
    add_common(p)


def add_resume_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "resume", help="let runners claim again", formatter_class=RAW,
        description="Remove the pause marker.", epilog="example:\n  spoolrender resume\n",
    )  # fmt: skip
    add_common(p)


def add_unblock_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "unblock", help="let a blocked host claim again", formatter_class=RAW,
        description="A host where many different jobs failed recently (host_block_jobs within "
        "host_block_window_seconds) is blocked: its runners claim one job at a time as a probe, every "
        "host_probe_seconds, for host_block_seconds; a probe job done lifts the block. A block never applies "
        "to the last online host of a queue, nor to more than host_block_max_share of the online hosts; "
        "`status` says why a host is blocked or held back, and until when. Once you fixed the host (disk, "
        "fonts, driver), clear the block and its failure history now.",
        epilog="example:\n  spoolrender unblock render-03\n",
    )  # fmt: skip
    p.add_argument("host", help="host name, as `status` shows it")
    add_common(p)


def add_purge_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "purge", help="forget old finished jobs, or empty the render cache", formatter_class=RAW,
        description="Delete the records (job file, runs, logs) of jobs in done/ and failed/ that finished "
        "longer ago than DURATION. Outputs are never touched. A purged job's id may be used again.\n\n"
        "With --cache: empty the render cache instead (<output_root>/.spoolrender-cache/, shared by every "
        "host of the spool), or with --older-than only its entries unused for that long. Safe while runners "
        "work: a job that was about to reuse an entry renders instead. Published outputs stay (they keep "
        "their bytes). Do it after changing something the cache key cannot see (docs/render-cache.md).",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender purge --older-than 30d          (the unit is required: 30 alone is refused)
              spoolrender purge --older-than 12h --state failed --dry-run
              spoolrender purge intro-1 intro-2 --dry-run   these jobs, whatever their age
              spoolrender purge --cache                   empty the render cache
              spoolrender purge --cache --older-than 7d   only entries unused for a week
            Runners purge by themselves with keep_done: 30d, keep_failed: 90d, keep_done_max: N in
            spoolrender.yaml (docs/operations.md, Retention).
        """),
    )  # fmt: skip
    p.add_argument(
        "--older-than", type=age, metavar="DURATION",
        help="a number with its unit: 90m, 12h, 30d, 2w (a bare 30 is refused: seconds or days?); "
        "required without --cache",
    )  # fmt: skip
    p.add_argument(
        "ids", nargs="*", metavar="ID",
        help="forget these finished jobs (any age) instead; a queued or running one is left (cancel it first)",
    )  # fmt: skip
    p.add_argument("--state", choices=("done", "failed"), help="only this state (default: both)")
    p.add_argument("--cache", action="store_true", help="purge the render cache instead of finished jobs")
    p.add_argument("--dry-run", action="store_true", help="only list what would go")
    add_common(p)


def add_list_parser(sub: Subparsers) -> None:
    from spoolrender.defaults import LIST_LIMIT, STATE_DIRS

    p = sub.add_parser(
        "list", help="every job of a state, newest first, a page at a time", formatter_class=RAW,
        description="List jobs one per line: state, id, when (queued, started, due, finished), queue and "
        "what became of it (progress and ETA, output, failure kind and reason). Newest first within each "
        "state (retry: next due first, its queue order); without STATE every state, in the spool's order. "
        "A page reads only its own jobs; --kind, --queue and --since read what they filter on (--queue on "
        "a big done/ reads each job's records). `status` stays the summary.",
        epilog=textwrap.dedent(f"""\
            examples:
              spoolrender list                          the newest {LIST_LIMIT} jobs of every state
              spoolrender list failed                   failed jobs, newest first
              spoolrender list failed --kind timeout    only those that timed out
              spoolrender list --queue urgent           the jobs of one queue
              spoolrender list done --since 1h          finished in the last hour
              spoolrender list done --limit 100 --offset 100   the second page of 100
              spoolrender list retry --json | jq '.jobs[].due'   the schema of GET /jobs
        """),
    )  # fmt: skip
    p.add_argument("state", nargs="?", choices=STATE_DIRS, metavar="STATE",
                   help=f"one of {', '.join(STATE_DIRS)} (default: every state)")  # fmt: skip
    p.add_argument("--queue", metavar="Q", help="only jobs of queue Q")
    p.add_argument("--kind", metavar="K", help="only failed or retry-waiting jobs whose last error is of kind K")
    p.add_argument("--since", type=duration, metavar="DURATION",
                   help="only jobs that got into their state in the last DURATION (90m, 12h, 7d)")  # fmt: skip
    p.add_argument("--limit", type=positive_int, default=LIST_LIMIT, metavar="N",
                   help=f"at most N jobs (default {LIST_LIMIT})")  # fmt: skip
    p.add_argument("--offset", type=non_negative_int, default=0, metavar="N", help="skip the first N jobs")
    p.add_argument("--json", action="store_true", help="one JSON object, as GET /jobs answers")
    add_common(p)


def add_retry_parser(sub: Subparsers) -> None:
    from spoolrender.defaults import HOPELESS_KINDS

    p = sub.add_parser(
        "retry", help="give failed jobs fresh attempts", formatter_class=RAW,
        description="Move failed jobs back to retry/, due now, with their attempt count reset. A cancelled "
        "job is a failed job: retrying it withdraws the cancel, and it renders again. A job waiting in "
        "retry/ for its next attempt is made due now (its attempts are kept). A job never runs before its "
        "not_before: a scheduled job that was cancelled and is retried waits for its time again, and "
        "retry does not move a schedule forward. The HTTP API's POST /jobs/ID/retry and the Python "
        "API's Spool.retry do the same.\n\n"
        f"Hopeless kinds ({', '.join(HOPELESS_KINDS)}) fail again the same way unless something changed "
        "(the job file, the project, the config), and a cancel was meant: --all-failed leaves them out "
        "unless --include-hopeless, or --kind names the kind. --kind and --queue choose among the failed "
        "jobs (so imply --all-failed).",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender retry intro-42
              spoolrender retry --all-failed --dry-run          what would go back, nothing moved
              spoolrender retry --all-failed                    all but the hopeless kinds
              spoolrender retry --all-failed --include-hopeless after fixing the project or config
              spoolrender retry --kind timeout                  only jobs that timed out
              spoolrender retry --kind cancelled                the cancelled ones too, named
              spoolrender retry --queue urgent --dry-run        the failed jobs of one queue
        """),
    )  # fmt: skip
    p.add_argument("id", nargs="?", help="job id")
    p.add_argument("--all-failed", action="store_true", help="every job in failed/ (but the hopeless kinds)")
    p.add_argument("--kind", action="append", metavar="K", help="only failed jobs of this failure kind (repeatable)")
    p.add_argument("--queue", metavar="Q", help="only failed jobs of queue Q")
    p.add_argument("--include-hopeless", action="store_true",
                   help=f"with --all-failed: {', '.join(HOPELESS_KINDS)} too")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="only list what would be retried")
    add_common(p)


def add_rerun_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "rerun", help="render a done job again, as a new run of the same id", formatter_class=RAW,
        description="Queue a done job's own job file again, under its id and output, with rerun: true "
        "and cache: false (it renders, never reuses the render cache). "
        "The published output and the done entry stay as they are while the new run waits and renders; "
        "its output replaces the old one only once it is verified and published (one rename), and the "
        "new run gets its own done/ entry (show lists both, newest first). Hooks fire for the new run as "
        "for any job. Refused while the id is queued or running.",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender rerun intro-42                after fixing a font or an asset
              spoolrender rerun intro-42 --dry-run      the job file it would queue
        """),
    )  # fmt: skip
    p.add_argument("id", help="id of a done job")
    p.add_argument("--dry-run", action="store_true", help="print the job file that would be queued; queue nothing")
    add_common(p)
