"""The arguments and `--help` text of every `spoolrender` command."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path
from typing import TypeAlias

from spoolrender.config.spool_config import CONFIG_KEYS
from spoolrender.core.version import __version__
from spoolrender.errors import SpoolrenderError

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
  spoolrender queue add urgent              a drop directory for a queue: incoming/urgent/
  spoolrender submit job.yaml               queue a job atomically
  spoolrender compositions                  what the project can render, and which props
  spoolrender run                           render jobs as they arrive (Ctrl-C to stop)
  spoolrender run --drain                   render what is queued, then exit (for cron)
  spoolrender status --watch                what is queued, running, failed (live)
  spoolrender show intro-42                 one job: state, attempts, errors, logs
  spoolrender list failed --since 1d        every failed job of the last day, newest first
  spoolrender rerun intro-42                render a done job again under its id
  spoolrender cancel intro-42               cancel a queued or running job
  spoolrender retry --all-failed            give failed jobs fresh attempts
  spoolrender pause / resume                stop / restart claiming on every host
  spoolrender purge --older-than 30d        forget finished jobs' records
  spoolrender serve                         HTTP API and live dashboard on http://127.0.0.1:8765/

The spool is ./spool unless --spool or SPOOLRENDER_SPOOL says otherwise.
"""


# The help text is laid out by hand (examples, exit statuses): printed as written.
RAW = argparse.RawDescriptionHelpFormatter
# What add_subparsers() returns; a string: the class is generic only to type checkers.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


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
    p.add_argument(
        "--log-format", choices=("text", "json"), default="text",
        help="json: one object per line (state changes carry job, from, to, attempt, host, duration, reason)",
    )  # fmt: skip


def _queue_name(value: str) -> str:
    from spoolrender.config.queues import name_problem

    problem = name_problem("queue", value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spoolrender", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"spoolrender {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_init_parser(sub)
    add_queue_parser(sub)
    add_submit_parser(sub)
    add_compositions_parser(sub)
    add_run_parser(sub)
    add_status_parser(sub)
    add_show_parser(sub)
    add_cancel_parser(sub)
    add_pause_parser(sub)
    add_resume_parser(sub)
    add_unblock_parser(sub)
    add_purge_parser(sub)
    add_retry_parser(sub)
    add_rerun_parser(sub)
    add_list_parser(sub)
    add_serve_parser(sub)
    return parser


def add_init_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "init", help="create a spool directory", formatter_class=RAW,
        description="Create a spool (or complete a partial one). Existing jobs and config are kept.",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender init /srv/render/spool --group render --remotion-project /srv/my-video
              spoolrender init spool          (finds ../remotion or the current directory's project)
            Members of the group can then drop job files into incoming/ (setgid, sticky).
            Without a Remotion project, `renderer: command` jobs still work; init says so.
        """),
    )  # fmt: skip
    p.add_argument("path", nargs="?", type=Path, help="spool directory (default: --spool or ./spool)")
    p.add_argument("--group", help="group allowed to submit jobs (incoming/ becomes group-writable)")
    p.add_argument(
        "--remotion-project", type=Path, metavar="DIR",
        help="your Remotion project (the directory with package.json); recorded as remotion_project. "
        "Without it init looks beside the spool (../remotion) and in the current directory",
    )  # fmt: skip
    p.add_argument(
        "--queue", action="append", default=[], metavar="NAME", type=_queue_name,
        help="also create the queue directory incoming/NAME (as `spoolrender queue add NAME`); repeatable",
    )  # fmt: skip
    _add_common(p)


def add_queue_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "queue", help="create queue directories (incoming/NAME/)", formatter_class=RAW,
        description="Create drop directories for named queues: incoming/NAME/, owned by the runner's user "
        "and the spool's group, mode 3775 like incoming/ (members drop files; nobody deletes or replaces "
        "another member's). Runners honour only such directories: one a member made with mkdir is theirs, "
        "so its files are not claimed and `status` says why.",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender queue add urgent            then: scp job.yaml host:spool/incoming/urgent/
              spoolrender queue add urgent batch      several at once
            Run it as the runner's user (or root). An existing runner-owned directory gets the
            right mode; one another user made is refused until its files are moved out.
        """),
    )  # fmt: skip
    p.add_argument("action", choices=("add",), help="add: create (or fix the mode of) the queue directories")
    p.add_argument("names", nargs="+", metavar="NAME", type=_queue_name, help="queue name (a-z, 0-9, - and _)")
    _add_common(p)


def add_submit_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "submit", help="queue job files atomically", formatter_class=RAW,
        description="Validate job files and drop them into incoming/ (each written under a hidden name, "
        "fsynced, then renamed: a runner never sees half a job). Every file is checked first, and every "
        "problem of every file is listed at once; the files are queued only if all of them pass, so a "
        "script can fix what was listed and submit the same command again.",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender submit intro.yaml
              spoolrender submit jobs/*.yaml              several files: all or nothing
              generate-job | spoolrender submit - --name recap-42.yaml
              spoolrender submit --no-check odd.yaml      the runner still validates it
              spoolrender submit --no-props-check promo.yaml
            A directory is refused: name its files (jobs/*.yaml).
            exit status: 0 every file queued (its path printed); 1 nothing queued: a file is
            invalid, unreadable, or clashes with another (each problem on stderr); 2 usage.
        """),
    )  # fmt: skip
    p.add_argument(
        "files", nargs="+", metavar="FILE",
        help="job file (a regular file), or - for standard input (once); each at most max_job_bytes",
    )  # fmt: skip
    p.add_argument("--name", help="file name in incoming/, for a single FILE (default: the file's name; "
                   "for stdin a unique one)")  # fmt: skip
    p.add_argument("--no-check", action="store_true", help="skip validation (the runner still validates)")
    p.add_argument(
        "--no-props-check", action="store_true",
        help="do not check the composition, still frame and props against the cached bundle "
        "of `spoolrender compositions` (props with the composition's own zod schema, which "
        "starts Chromium; the runner still checks them before the first frame)",
    )  # fmt: skip
    _add_common(p)


def add_compositions_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "compositions", help="list the Remotion project's compositions and their props", formatter_class=RAW,
        description="List the compositions of the Remotion project: id, size, fps, duration, default "
        "props, and the props JSON schema of compositions with a zod 4 schema (<Composition schema>). "
        "Bundles the project if its current content has no cached bundle, then opens the bundle in "
        "Chromium (seconds); the listing is cached with the bundle, and `submit` checks job props "
        "against it while the project is unchanged.",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender compositions
              spoolrender compositions --json | jq '.compositions[].id'
              spoolrender compositions --project promo   (a project of spoolrender.yaml's projects:)
            A job's props are merged over the default props, so only props without a default
            must be given.
        """),
    )  # fmt: skip
    p.add_argument(
        "--project", metavar="NAME",
        help="a project of the config's `projects:` map (default: remotion_project)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON object: {project, compositions: [...]}")
    _add_common(p)


def add_run_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "run", help="render jobs from the spool", formatter_class=RAW,
        description="Claim and render jobs. Without --drain it runs until SIGTERM/SIGINT: the first "
        "signal stops claiming and lets running jobs finish (grace_seconds), then puts them back "
        "into retry/ without using an attempt; a second signal cancels at once.",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender run                         long-running (systemd)
              spoolrender run --drain                 cron: render what is queued, then exit
              spoolrender run --slots 2 --set lease_seconds=120
              spoolrender run --metrics-textfile /var/lib/prometheus/node-exporter/spoolrender.prom
              spoolrender run --queues urgent,default   urgent first, then default; nothing else
              spoolrender run --queues urgent,\\* --tags gpu   urgent first, then any queue; jobs may require gpu
              spoolrender run --max-jobs 100          recycled worker: 100 jobs, then exit 5
              spoolrender run --drain --max-runtime 50m   cron every hour: never overlaps the next
              spoolrender run --drain --no-live       plain log lines on a terminal too
              spoolrender run --set keep_done=30d --set keep_failed=90d   forget old finished jobs (retention)
            Several runners, on one host or on many sharing the spool, are safe together.
            exit status: 0 stopped by a signal, or drained; 3 (--drain) some job failed for good;
            4 (--drain) spool paused or this host blocked; 5 --max-jobs reached; 6 --max-runtime reached.
            With --drain, 3 wins over 5 and 6: a cron job hears about failures first.
        """),
    )  # fmt: skip
    p.add_argument("--drain", action="store_true", help="exit once nothing is claimable (for cron)")
    p.add_argument(
        "--max-jobs", type=positive_int, metavar="N",
        help="claim at most N jobs, let them finish (however long), then exit 5",
    )  # fmt: skip
    p.add_argument(
        "--max-runtime", type=duration, metavar="DURATION",
        help="after DURATION (90s, 15m, 12h, 7d) stop as on SIGTERM: no more claims, running jobs get "
        "grace_seconds, then go back to retry/ without using an attempt; exit 6",
    )  # fmt: skip
    p.add_argument(
        "--queues", metavar="Q1,Q2", help="serve these queues, in this order: the first with claimable work "
        "wins, then priority and arrival within it; * is every other queue (default: *, all queues by priority)",
    )  # fmt: skip
    p.add_argument(
        "--tags", metavar="T1,T2", help="this runner's capabilities: it takes a job only if it has every "
        "tag in the job's requires: (default: none, so only jobs that require nothing)",
    )  # fmt: skip
    p.add_argument("--slots", type=int, help="jobs at once (default: from cores and free memory)")
    p.add_argument("--output-root", type=Path, help="where outputs go (default: output_root setting)")
    p.add_argument("--watch", choices=("auto", "inotify", "polling"), help="how to notice new jobs")
    p.add_argument(
        "--metrics-textfile",
        type=Path,
        metavar="PATH",
        help="write Prometheus metrics here (atomically) for node_exporter's textfile collector",
    )
    p.add_argument("--runner-name", help="the runner label of this runner's metrics (default: host name)")
    _add_live_option(p)
    _add_common(p)


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
    _add_common(p)


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
    _add_common(p)


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
    _add_common(p)


def add_pause_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "pause", help="stop claiming on every host", formatter_class=RAW,
        description="Write a spool-wide pause marker: no runner on any host claims new jobs while it exists. "
        "Running jobs go on. `run --drain` on a paused spool exits 4 at once.",
        epilog='example:\n  spoolrender pause --reason "disk maintenance"\n',
    )  # fmt: skip
    p.add_argument("--reason", default="paused by operator", help="shown by status and logs")
    _add_common(p)


def add_resume_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "resume", help="let runners claim again", formatter_class=RAW,
        description="Remove the pause marker.", epilog="example:\n  spoolrender resume\n",
    )  # fmt: skip
    _add_common(p)


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
    _add_common(p)


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
    _add_common(p)


def add_serve_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "serve", help="HTTP API, event stream, metrics and dashboard", formatter_class=RAW,
        description="Serve the spool over HTTP: GET /jobs, /jobs/ID, /jobs/ID/log and /status (JSON, the "
        "schema of `status --json`), /events (server-sent events: state changes and progress), /metrics "
        "(Prometheus), /history (the plots' samples), the done jobs' videos (/jobs/ID/output, seekable) and a "
        "live dashboard at / (job pages, every state page by page, actions, plots). It runs no runner, so it works on "
        "any host that mounts the spool. Write actions (POST /jobs, /jobs/ID/retry, /jobs/ID/cancel, /pause, "
        "/resume) stay off unless serve_token_file (a file only you can read: mode 600) or "
        "serve_token is set in the spool config; they need Authorization: Bearer <token>.",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender serve                              http://127.0.0.1:8765/ (this host only)
              spoolrender serve --listen 127.0.0.1:0         any free port (printed on start)
              spoolrender serve --listen 0.0.0.0:8765        every interface: only if you mean it
              curl -s 'localhost:8765/jobs?state=failed&limit=20'
              curl -N localhost:8765/events?job=intro-42     follow one job to done/failed
              curl -H "Authorization: Bearer $TOKEN" --data-binary @intro.yaml \\
                   'localhost:8765/jobs?name=intro-42.yaml'
            Stops on SIGTERM or Ctrl-C.
        """),
    )  # fmt: skip
    p.add_argument(
        "--listen", default="127.0.0.1:8765", metavar="HOST:PORT",
        help="address to listen on (default 127.0.0.1:8765; [::1]:PORT for IPv6; port 0 picks a free one)",
    )  # fmt: skip
    p.add_argument("--poll", type=seconds, default=1.0, metavar="SECONDS",
                   help="how often the event stream looks at the spool while a client listens (default 1)")  # fmt: skip
    p.add_argument("--keepalive", type=seconds, default=15.0, metavar="SECONDS",
                   help="comment line on idle event streams, so proxies keep them open (default 15)")  # fmt: skip
    p.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME",
        help="also answer requests for this Host name (e.g. behind a reverse proxy); repeatable. Without it "
        "only the address literal a client connected to (and localhost on loopback) is answered, on every "
        "--listen address, 0.0.0.0 and [::] included (DNS rebinding protection)",
    )  # fmt: skip
    p.add_argument("--header-timeout", type=seconds, default=10.0, metavar="SECONDS",
                   help="a request's line and headers must arrive within this, in total (default 10)")  # fmt: skip
    p.add_argument("--max-per-client", type=int, default=16, metavar="N",
                   help="connections at once per client address (default 16; raise it behind a proxy)")  # fmt: skip
    p.add_argument("--history-interval", type=seconds, default=60.0, metavar="SECONDS",
                   help="one sample of the spool's history (the dashboard's plots; kept 48 h in "
                        ".spoolrender/history/) per this many seconds (default 60)")  # fmt: skip
    _add_common(p)


def _add_live_option(p: argparse.ArgumentParser) -> None:
    """`run --no-live` (cli/live_display.py): the display is on by itself only where someone watches."""
    p.add_argument(
        "--no-live", action="store_true",
        help="no live display (slots, progress, ETA, totals, last failures); it is shown only when stdout is "
        "a terminal and not under systemd (INVOCATION_ID, JOURNAL_STREAM), and logs stay the same lines",
    )  # fmt: skip


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
    _add_common(p)


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
    _add_common(p)


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
    _add_common(p)


def unknown_command(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The error for a first argument that is no command (``stauts``), with a did-you-mean;
    None if it is one (or an option: argparse words those)."""
    from spoolrender.core.suggest import did_you_mean

    if not argv or argv[0].startswith("-"):
        return None
    commands = [name for a in parser._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices]
    if argv[0] in commands:
        return None
    hint = did_you_mean(argv[0], commands)
    return f"unknown command {argv[0]!r}" + (f"; {hint}" if hint else "") + f" (commands: {', '.join(commands)})"


def comma_names(text: str | None) -> list[str] | None:
    """A comma-separated flag as a list (config checks the names); None when not given."""
    return None if text is None else [part.strip() for part in text.split(",") if part.strip()]


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def duration(text: str) -> float:
    """A DURATION flag: a number with its unit (``50m``), > 0."""
    seconds = _parse(text, bare_seconds=False)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration > 0, got {text!r}")
    return seconds


def age(text: str) -> float:
    """An age flag (``--older-than``): a number with its unit, >= 0 (``0s``: everything)."""
    return _parse(text, bare_seconds=False)


def seconds(text: str) -> float:
    """A SECONDS flag: a bare number is seconds (the name says so); a unit may be given (``2m``)."""
    return _parse(text, bare_seconds=True)


def watch_interval(text: str) -> float:
    """``status --watch``'s interval: at least STATUS_WATCH_MIN_S (0 or less redrew in a tight loop)."""
    from spoolrender.defaults import STATUS_WATCH_MIN_S

    interval = _parse(text, bare_seconds=True)
    if interval < STATUS_WATCH_MIN_S:
        raise argparse.ArgumentTypeError(f"expected an interval of at least {STATUS_WATCH_MIN_S:g} s, got {text!r}")
    return interval


def _parse(text: str, *, bare_seconds: bool) -> float:
    from spoolrender.config.durations import parse_duration

    try:
        return parse_duration(text, bare_seconds=bare_seconds)
    except SpoolrenderError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
