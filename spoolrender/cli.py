"""The `spoolrender` command. The only place that configures logging."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spoolrender import __version__
from spoolrender.config import CONFIG_KEYS, SpoolConfig, load_config
from spoolrender.defaults import CONFIG_FILENAME
from spoolrender.display import printable
from spoolrender.durable import set_fsync
from spoolrender.errors import JobInvalid, SpoolrenderError

if TYPE_CHECKING:
    from spoolrender.api import Spool
    from spoolrender.runner import RunSummary

log = logging.getLogger("spoolrender")

EXIT_OK = 0
EXIT_ERROR = 1  # bad config, missing spool, invalid job on submit, unknown id
EXIT_USAGE = 2  # argparse
EXIT_JOBS_FAILED = 3  # run --drain: at least one job failed for good during this run
EXIT_PAUSED = 4  # run --drain: the spool is paused, nothing was claimed
EXIT_MAX_JOBS = 5  # run --max-jobs: the limit was reached and those jobs finished
EXIT_MAX_RUNTIME = 6  # run --max-runtime: the time was up (running jobs went back to retry/)
EXIT_INTERRUPTED = 130  # SIGINT ended a short command (128 + SIGINT, as shells report it)

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
  spoolrender compositions                  what the project can render, and which props
  spoolrender run                           render jobs as they arrive (Ctrl-C to stop)
  spoolrender run --drain                   render what is queued, then exit (for cron)
  spoolrender status --watch                what is queued, running, failed (live)
  spoolrender show intro-42                 one job: state, attempts, errors, logs
  spoolrender cancel intro-42               cancel a queued or running job
  spoolrender retry --all-failed            give failed jobs fresh attempts
  spoolrender pause / resume                stop / restart claiming on every host
  spoolrender purge --older-than 30d        forget finished jobs' records
  spoolrender serve                         HTTP API and live dashboard on http://127.0.0.1:8765/

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
    p.add_argument(
        "--log-format", choices=("text", "json"), default="text",
        help="json: one object per line (state changes carry job, from, to, attempt, host, duration, reason)",
    )  # fmt: skip


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
    p.add_argument("file", help="job file (a regular file), or - for standard input; at most max_job_bytes")
    p.add_argument("--name", help="file name in incoming/ (default: the file's name; for stdin a unique one)")
    p.add_argument("--no-check", action="store_true", help="skip validation (the runner still validates)")
    p.add_argument(
        "--no-props-check", action="store_true",
        help="do not check props against the composition's schema from the cached listing of "
        "`spoolrender compositions` (the render still validates them)",
    )  # fmt: skip
    _add_common(p)

    p = sub.add_parser(
        "compositions", help="list the Remotion project's compositions and their props", formatter_class=raw,
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
              spoolrender run --metrics-textfile /var/lib/prometheus/node-exporter/spoolrender.prom
              spoolrender run --queues urgent,default   urgent first, then default; nothing else
              spoolrender run --queues urgent,\\* --tags gpu   urgent first, then any queue; jobs may require gpu
              spoolrender run --max-jobs 100          recycled worker: 100 jobs, then exit 5
              spoolrender run --drain --max-runtime 50m   cron every hour: never overlaps the next
            Several runners, on one host or on many sharing the spool, are safe together.
            exit status: 0 stopped by a signal, or drained; 3 (--drain) some job failed for good;
            4 (--drain) spool paused or this host blocked; 5 --max-jobs reached; 6 --max-runtime reached.
            With --drain, 3 wins over 5 and 6: a cron job hears about failures first.
        """),
    )  # fmt: skip
    p.add_argument("--drain", action="store_true", help="exit once nothing is claimable (for cron)")
    p.add_argument(
        "--max-jobs", type=_positive_int, metavar="N",
        help="claim at most N jobs, let them finish (however long), then exit 5",
    )  # fmt: skip
    p.add_argument(
        "--max-runtime", type=_duration, metavar="DURATION",
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
    _add_common(p)

    p = sub.add_parser(
        "status", help="show the spool at a glance", formatter_class=raw,
        description="Counts per state, the age of the oldest waiting job, running jobs (host, pid, progress, "
        "ETA, heartbeat age, STALE when past the lease), the retry queue with due times, recent failures "
        "with their reason, and the runners seen. Jobs rendered in chunks show once, under SPLIT, with "
        "their chunks done/running/waiting, progress and ETA. Counts come from directory listings only, "
        "so it stays fast on a spool with 100k finished jobs.",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender status
              spoolrender status --watch 2              refresh every 2 s (Ctrl-C to leave)
              spoolrender status --json | jq .counts    schema: README, "status --json"
              spoolrender status --prometheus > /var/lib/prometheus/node-exporter/spool.prom.tmp
        """),
    )  # fmt: skip
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="machine-readable output (stable schema, see README)")
    fmt.add_argument("--prometheus", action="store_true", help="the spool gauges in Prometheus text format")
    p.add_argument("--watch", nargs="?", type=float, const=2.0, metavar="SECONDS", help="refresh in place")
    _add_common(p)

    p = sub.add_parser(
        "show", help="one job: state, attempts, errors, logs", formatter_class=raw,
        description="Find a job by id in every state and show its state, attempts, each run's outcome and "
        "error, its result or failure, and the paths of its render logs. --json prints one object: the "
        "current entry, with `entries` (every entry of the id) and `others` (the other entries described).",
        epilog="examples:\n  spoolrender show intro-42\n  spoolrender show intro-42 --json\n",
    )  # fmt: skip
    p.add_argument("id", help="job id")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_common(p)

    p = sub.add_parser(
        "cancel", help="cancel a queued or running job", formatter_class=raw,
        description="A waiting job (incoming/ or retry/) is moved to failed/ as cancelled at once. A running "
        "job is stopped by the runner that owns it, on whichever host, at its next heartbeat "
        "(heartbeat_seconds), then failed as cancelled. A job rendered in chunks is cancelled whole: its "
        "running chunks are stopped the same way and its chunk files removed.",
        epilog="example:\n  spoolrender cancel intro-42\n",
    )  # fmt: skip
    p.add_argument("id", help="job id")
    _add_common(p)

    p = sub.add_parser(
        "pause", help="stop claiming on every host", formatter_class=raw,
        description="Write a spool-wide pause marker: no runner on any host claims new jobs while it exists. "
        "Running jobs go on. `run --drain` on a paused spool exits 4 at once.",
        epilog='example:\n  spoolrender pause --reason "disk maintenance"\n',
    )  # fmt: skip
    p.add_argument("--reason", default="paused by operator", help="shown by status and logs")
    _add_common(p)

    p = sub.add_parser(
        "resume", help="let runners claim again", formatter_class=raw,
        description="Remove the pause marker.", epilog="example:\n  spoolrender resume\n",
    )  # fmt: skip
    _add_common(p)

    p = sub.add_parser(
        "unblock", help="let a blocked host claim again", formatter_class=raw,
        description="A host where many different jobs failed recently (host_block_jobs within "
        "host_block_window_seconds) is blocked: its runners claim nothing for host_block_seconds, and "
        "`status` says why. Once you fixed the host (disk, fonts, driver), clear the block and its failure "
        "history now.",
        epilog="example:\n  spoolrender unblock render-03\n",
    )  # fmt: skip
    p.add_argument("host", help="host name, as `status` shows it")
    _add_common(p)

    p = sub.add_parser(
        "purge", help="forget old finished jobs", formatter_class=raw,
        description="Delete the records (job file, runs, logs) of jobs in done/ and failed/ that finished "
        "longer ago than DURATION. Outputs are never touched. A purged job's id may be used again.",
        epilog=textwrap.dedent("""\
            examples:
              spoolrender purge --older-than 30d
              spoolrender purge --older-than 12h --state failed --dry-run
        """),
    )  # fmt: skip
    p.add_argument("--older-than", required=True, metavar="DURATION", help="e.g. 90m, 12h, 30d, 2w")
    p.add_argument("--state", choices=("done", "failed"), help="only this state (default: both)")
    p.add_argument("--dry-run", action="store_true", help="only list what would go")
    _add_common(p)

    p = sub.add_parser(
        "retry", help="give failed jobs fresh attempts", formatter_class=raw,
        description="Move failed jobs back to retry/, due now, with their attempt count reset. A job "
        "waiting in retry/ for its next attempt is made due now (its attempts are kept).",
        epilog="examples:\n  spoolrender retry intro-42\n  spoolrender retry --all-failed\n",
    )  # fmt: skip
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("id", nargs="?", help="job id")
    group.add_argument("--all-failed", action="store_true", help="every job in failed/")
    _add_common(p)

    p = sub.add_parser(
        "serve", help="HTTP API, event stream, metrics and dashboard", formatter_class=raw,
        description="Serve the spool over HTTP: GET /jobs, /jobs/ID, /jobs/ID/log and /status (JSON, the "
        "schema of `status --json`), /events (server-sent events: state changes and progress), /metrics "
        "(Prometheus), /history (the plots' samples), the done jobs' videos (/jobs/ID/output, seekable) and a "
        "live dashboard at / (job pages, every state page by page, actions, plots). It runs no runner, so it works on "
        "any host that mounts the spool. Write actions (POST /jobs, /jobs/ID/retry, /jobs/ID/cancel, /pause, "
        "/resume) stay off unless serve_token_file (a file only you and the spool's group can read) or "
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
    p.add_argument("--poll", type=float, default=1.0, metavar="SECONDS",
                   help="how often the event stream looks at the spool while a client listens (default 1)")  # fmt: skip
    p.add_argument("--keepalive", type=float, default=15.0, metavar="SECONDS",
                   help="comment line on idle event streams, so proxies keep them open (default 15)")  # fmt: skip
    p.add_argument(
        "--allow-host", action="append", default=[], metavar="NAME",
        help="also answer requests for this Host name (e.g. behind a reverse proxy); repeatable. Without it "
        "only the address literal a client connected to (and localhost on loopback) is answered, on every "
        "--listen address, 0.0.0.0 and [::] included (DNS rebinding protection)",
    )  # fmt: skip
    p.add_argument("--header-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="a request's line and headers must arrive within this, in total (default 10)")  # fmt: skip
    p.add_argument("--max-per-client", type=int, default=16, metavar="N",
                   help="connections at once per client address (default 16; raise it behind a proxy)")  # fmt: skip
    p.add_argument("--history-interval", type=float, default=60.0, metavar="SECONDS",
                   help="one sample of the spool's history (the dashboard's plots; kept 48 h in "
                        ".spoolrender/history/) per this many seconds (default 60)")  # fmt: skip
    _add_common(p)
    return parser


def _setup_logging(args: argparse.Namespace) -> None:
    level = logging.WARNING if args.quiet else (logging.INFO if args.verbose < 2 else logging.DEBUG)
    if args.command != "run" and not args.verbose:
        level = logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        _JsonFormatter() if args.log_format == "json"
        else _TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )  # fmt: skip
    handler.addFilter(_WatchdogStopNoise())
    logging.basicConfig(level=level, handlers=[handler])


class _WatchdogStopNoise(logging.Filter):
    # watchdog 7 logs this at ERROR when its emitter thread is stopped while blocked in
    # a read: a harmless race of observer.stop(), not a lost event (listings are the truth).
    def filter(self, record: logging.LogRecord) -> bool:
        return "called when the thread is inactive" not in record.getMessage()


class _TextFormatter(logging.Formatter):
    """One line per record: spool text in messages (reasons, file names) is escaped.

    A render's error line or a dropped file's name can hold terminal escapes or newlines;
    in a log they would forge lines or drive the reader's terminal. Tracebacks (appended
    after the message by format()) keep their own lines. JSON logs escape by themselves.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message, double_backslashes=False)
        return super().formatMessage(record)


class _JsonFormatter(logging.Formatter):
    """One JSON object per line for log shippers; state changes add their fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        event = getattr(record, "event", None)
        if isinstance(event, dict):
            out.update(event)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


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
    config = load_config(_spool_path(args), overrides=overrides)
    set_fsync(config.fsync)
    return config


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args)
    try:
        return _dispatch(args)
    except JobInvalid as exc:
        print("job is invalid:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {printable(problem)}", file=sys.stderr)
        return EXIT_ERROR
    except SpoolrenderError as exc:
        print(f"spoolrender: {printable(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:
        # The reader went away (`status --watch | head`): nothing left to say to anyone.
        _silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        # Ctrl-C in a short command (a slow `show`, `submit -` waiting for its input):
        # a person asked to stop; a traceback would only hide that.
        return EXIT_INTERRUPTED


def _silence_stdout() -> None:
    # Point stdout at /dev/null, so the interpreter's final flush does not raise again.
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _say(text: str) -> None:
    """One line for people on stdout, control characters escaped (spool text is untrusted)."""
    print(printable(text))


def _init(args: argparse.Namespace) -> int:
    from spoolrender import project_setup
    from spoolrender.layout import init_spool

    project: Path | None = None
    if args.remotion_project is not None:
        project = args.remotion_project.expanduser().resolve()
        problem = project_setup.project_problem(project)
        if problem is not None:
            raise SpoolrenderError(f"--remotion-project: {problem}")
    layout = init_spool(_spool_path(args), group=args.group)
    print(f"spool ready at {printable(layout.root)}")
    configured = project_setup.configured_project(layout.root / CONFIG_FILENAME)
    if project is None and configured is not None:
        print(f"Remotion project: {printable(configured)} (remotion_project, kept)")
        return EXIT_OK
    if project is None:
        project = project_setup.detect_project(layout.root, Path.cwd())
        if project is None and sys.stdin.isatty() and sys.stdout.isatty():
            answer = input("Remotion project directory (Enter to skip): ").strip()
            if answer:
                project = Path(answer).expanduser().resolve()
                problem = project_setup.project_problem(project)
                if problem is not None:
                    raise SpoolrenderError(problem)
    if project is None:
        print(
            "no Remotion project set: `renderer: remotion` jobs fail until you run "
            f"`spoolrender init {printable(layout.root)} --remotion-project DIR` (DIR holds your project's "
            f"package.json) or set remotion_project in {printable(layout.root / CONFIG_FILENAME)}; "
            "`renderer: command` jobs work without one",
            file=sys.stderr,
        )
        return EXIT_OK
    project_setup.record_project(layout.root, project)
    print(f"Remotion project: {printable(project)} (recorded as remotion_project)")
    hint = project_setup.install_hint(project)
    if hint is not None:
        print(f"warning: {hint}", file=sys.stderr)
    return EXIT_OK


def _spool(args: argparse.Namespace) -> Spool:
    from spoolrender.api import Spool

    return Spool(config=_config(args))


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "init":
        return _init(args)
    if args.command == "submit":
        from spoolrender.control import read_submission

        spool = _spool(args)
        data, name = read_submission(args.file, args.name, spool.config.max_job_bytes)
        job = spool.submit(data, name=name, check=not args.no_check, props_check=not args.no_props_check)
        _say(str(job.submitted_as))
        return EXIT_OK
    if args.command == "compositions":
        return _compositions(args)
    if args.command == "run":
        from spoolrender.runner import Runner

        extra = {"slots": args.slots, "output_root": args.output_root, "watch": args.watch}
        config = _config(args, {**extra, "queues": _names(args.queues), "tags": _names(args.tags)})
        runner = Runner(
            config, drain=args.drain, metrics_textfile=args.metrics_textfile, runner_name=args.runner_name,
            max_jobs=args.max_jobs, max_runtime=args.max_runtime,
        )  # fmt: skip
        runner.install_signal_handlers()
        summary = runner.run()
        return _run_exit_status(args, summary, config.output_root)
    if args.command == "status":
        return _status(args)
    if args.command == "show":
        from spoolrender.lookup import format_description

        document = _spool(args).show(args.id)
        if args.json:
            print(json.dumps(document, indent=2, default=str))
        else:
            print("\n\n".join(format_description(info) for info in (document, *document["others"])))
        return EXIT_OK
    if args.command == "cancel":
        for line in _spool(args).cancel(args.id):
            _say(line)
        return EXIT_OK
    if args.command == "pause":
        marker = _spool(args).pause(args.reason)
        _say(f"paused: no runner claims new jobs until `spoolrender resume` ({marker})")
        return EXIT_OK
    if args.command == "unblock":
        from spoolrender.hosts import unblock
        from spoolrender.layout import SpoolLayout

        layout = SpoolLayout(_config(args).spool)
        layout.check()
        was = unblock(layout, args.host)
        print(f"host {printable(args.host)} " + ("unblocked: its runners claim again" if was else "was not blocked"))
        return EXIT_OK
    if args.command == "resume":
        print("resumed" if _spool(args).resume() else "the spool was not paused")
        return EXIT_OK
    if args.command == "purge":
        from spoolrender.control import parse_duration

        states = (args.state,) if args.state else ("done", "failed")
        removed = _spool(args).purge(parse_duration(args.older_than), states, dry_run=args.dry_run)
        for entry in removed:
            _say(entry)
        print(f"{'would purge' if args.dry_run else 'purged'} {len(removed)} job(s)")
        return EXIT_OK
    if args.command == "retry":
        spool = _spool(args)
        if args.all_failed:
            moved = spool.retry_all_failed()
            _say(f"{len(moved)} job(s) sent back to retry/: {', '.join(moved) or '-'}")
        else:
            for line in spool.retry(args.id):
                _say(line)
        return EXIT_OK
    if args.command == "serve":
        return _serve(args)
    raise AssertionError(args.command)  # pragma: no cover


def _names(text: str | None) -> list[str] | None:
    """A comma-separated flag as a list (config checks the names); None when not given."""
    return None if text is None else [part.strip() for part in text.split(",") if part.strip()]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _duration(text: str) -> float:
    from spoolrender.control import parse_duration

    try:
        seconds = parse_duration(text)
    except SpoolrenderError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration > 0, got {text!r}")
    return seconds


def _run_exit_status(args: argparse.Namespace, summary: RunSummary, output_root: Path) -> int:
    """The exit status of `run`: why it stopped, failures first for --drain (see --help)."""
    limit = {"max-jobs": EXIT_MAX_JOBS, "max-runtime": EXIT_MAX_RUNTIME}.get(summary.stopped_by)
    if args.drain or limit is not None:
        try:
            print(
                f"{summary.stopped_by}: {summary.claimed} claimed, {summary.done} done, {summary.retried} to retry, "
                f"{summary.requeued} put back, {summary.failed} failed"
                f"{' (spool paused)' if summary.paused else ''} (outputs under {printable(output_root)})",
                flush=True,
            )
        except BrokenPipeError:
            _silence_stdout()  # a closed pipe must not turn a failed drain's status into 0
    if args.drain and summary.failed:
        return EXIT_JOBS_FAILED
    if limit is not None:
        return limit
    if args.drain and (summary.paused or summary.blocked) and not summary.claimed:
        return EXIT_PAUSED
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    from spoolrender.layout import SpoolLayout
    from spoolrender.serve.listen import ServeOptions, parse_listen
    from spoolrender.serve.server import SpoolServer

    if not (0 < args.poll <= 60 and 0 < args.keepalive <= 3600):
        raise SpoolrenderError("--poll must be in (0, 60] and --keepalive in (0, 3600] seconds")
    config = _config(args)
    SpoolLayout(config.spool).check()  # a typo in --spool fails now, not on the first request
    if not (0 < args.header_timeout <= 600 and args.max_per_client >= 1 and 1 <= args.history_interval <= 3600):
        raise SpoolrenderError(
            "--header-timeout must be in (0, 600] seconds, --max-per-client at least 1, "
            "--history-interval in [1, 3600] seconds"
        )
    options = ServeOptions(
        poll_seconds=args.poll,
        keepalive_seconds=args.keepalive,
        allow_hosts=tuple(args.allow_host),
        header_seconds=args.header_timeout,
        max_per_client=args.max_per_client,
        history_seconds=args.history_interval,
    )
    try:
        server = SpoolServer(parse_listen(args.listen), config, options)
    except OSError as exc:
        raise SpoolrenderError(f"cannot listen on {args.listen}: {exc.strerror or exc}") from exc
    writes = "on (a serve token is set)" if server.token else "off (no serve_token_file or serve_token)"
    print(f"serving {server.url} for spool {config.spool}; write actions {writes}", flush=True)
    server.install_signal_handlers()
    server.serve()
    return EXIT_OK


def _compositions(args: argparse.Namespace) -> int:
    from spoolrender.compositions import describe

    spool = _spool(args)
    found = spool.compositions(args.project)
    if args.json:
        project = str(spool.config.project_dir(args.project))
        document = {"project": project, "compositions": [c.as_json() for c in found]}
        print(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        sys.stdout.write(describe(found))
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    from spoolrender.status import format_status

    spool = _spool(args)
    if args.prometheus:
        from spoolrender.layout import SpoolLayout
        from spoolrender.metrics import spool_metrics_text

        sys.stdout.write(spool_metrics_text(SpoolLayout(spool.path), spool.config.lease_seconds))
        return EXIT_OK
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    stop = _stop_on_signals() if args.watch is not None else None
    while True:
        document = spool.status().document
        text = json.dumps(document, indent=2, sort_keys=True) if args.json else format_status(document, colour=colour)
        if stop is None:
            print(text)
            return EXIT_OK
        # Clear and redraw in place on a terminal; elsewhere, one snapshot after another.
        sys.stdout.write(("\x1b[H\x1b[2J" if sys.stdout.isatty() else "") + text + "\n")
        sys.stdout.flush()
        if stop.wait(args.watch):
            return EXIT_OK


def _stop_on_signals() -> threading.Event:
    """An event set by SIGINT or SIGTERM: a long-running command's explicit way out.

    Explicit handlers, not Python's default KeyboardInterrupt: a command started with
    SIGINT ignored (`nohup ... &`, some CI and cron set-ups) inherits SIG_IGN and would
    otherwise never stop on SIGINT, and SIGTERM would kill it without a clean exit.
    """
    stop = threading.Event()

    def handle(signum: int, frame: object) -> None:
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, handle)
    return stop


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
