"""The arguments and `--help` text of every `spoolrender` command: the top level, and the
commands that make a spool, queue jobs, render them and serve them. The operator's
commands over jobs already queued are cli/operator_parsers.py's; the common options and
value types, cli/arguments.py's."""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

from spoolrender.cli.arguments import (
    RAW,
    Subparsers,
    add_common,
    add_live_option,
    duration,
    positive_int,
    queue_name,
    seconds,
)
from spoolrender.cli.operator_parsers import (
    add_cancel_parser,
    add_list_parser,
    add_pause_parser,
    add_purge_parser,
    add_rerun_parser,
    add_resume_parser,
    add_retry_parser,
    add_show_parser,
    add_status_parser,
    add_unblock_parser,
)
from spoolrender.core.version import __version__

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
        "--queue", action="append", default=[], metavar="NAME", type=queue_name,
        help="also create the queue directory incoming/NAME (as `spoolrender queue add NAME`); repeatable",
    )  # fmt: skip
    add_common(p)


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
    p.add_argument("names", nargs="+", metavar="NAME", type=queue_name, help="queue name (a-z, 0-9, - and _)")
    add_common(p)


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
    add_common(p)


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
    add_common(p)


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
    add_live_option(p)
    add_common(p)


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
    add_common(p)


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
