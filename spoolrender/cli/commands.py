"""What each `spoolrender` command does: thin wrappers around :mod:`spoolrender.api`."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spoolrender.cli.arguments import comma_names
from spoolrender.cli.exit_codes import (
    EXIT_ERROR,
    EXIT_JOBS_FAILED,
    EXIT_MAX_JOBS,
    EXIT_MAX_RUNTIME,
    EXIT_OK,
    EXIT_PAUSED,
)
from spoolrender.cli.ops_commands import list_command, rerun_command, retry_command
from spoolrender.config.spool_config import SpoolConfig, load_config
from spoolrender.core.safe_text import printable
from spoolrender.defaults import CONFIG_FILENAME
from spoolrender.errors import JobInvalid, SpoolrenderError
from spoolrender.spool.durable import set_fsync

if TYPE_CHECKING:
    from spoolrender.api import Spool
    from spoolrender.ops.submission import Submission
    from spoolrender.runner.loop import Runner, RunSummary


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


def silence_stdout() -> None:
    # Point stdout at /dev/null, so the interpreter's final flush does not raise again.
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _purge_cache(args: argparse.Namespace) -> int:
    from spoolrender.render_cache.entries import RenderCache
    from spoolrender.render_cache.in_flight import InFlight
    from spoolrender.spool.clock import SystemClock
    from spoolrender.spool.heartbeat import LivenessTracker
    from spoolrender.spool.layout import SpoolLayout

    if args.state is not None:
        raise SpoolrenderError("--state is for finished jobs, not for --cache")
    config = _config(args)
    layout = SpoolLayout(config.spool)
    layout.check()
    cache = RenderCache(config.output_root, config.render_cache_max_bytes)
    removed = cache.purge(args.older_than, dry_run=args.dry_run)
    if not args.dry_run:
        InFlight(cache.root, layout, config.lease_seconds, LivenessTracker(SystemClock())).clear_ended()
    for entry in removed:
        _say(f"{entry.key[:16]}  {entry.bytes} bytes  rendered by {entry.source.get('id')}")
    size = sum(e.bytes for e in removed)
    print(f"{'would remove' if args.dry_run else 'removed'} {len(removed)} render cache entries ({size} bytes)")
    return EXIT_OK


def _purge_jobs(args: argparse.Namespace) -> int:
    """`purge ID...`: those finished jobs' records, as the dashboard's delete (spoolrender.ops.bulk)."""
    from spoolrender.ops.bulk import BulkAction, bulk_action, locate
    from spoolrender.ops.id_hints import id_hint

    if args.older_than is not None or args.state is not None:
        raise SpoolrenderError("purge takes job ids or --older-than/--state, not both")
    config = _config(args)
    targets, missing = locate(config, args.ids)
    result = bulk_action(config, BulkAction.DELETE, targets, missing, dry_run=args.dry_run, who="spoolrender purge")
    for item in result.acted:
        _say(f"{item.entry}: {item.text}")
    for item in result.skipped:
        _say(f"{item.job_id}: {item.text}")
    for job_id in result.missing:
        _say(f"{job_id}: no such job{id_hint(config.spool, job_id)}")
    print(f"{'would purge' if args.dry_run else 'purged'} {result.jobs} job(s)")
    return EXIT_OK if not result.skipped and not result.missing else EXIT_ERROR


def _say(text: str) -> None:
    """One line for people on stdout, control characters escaped (spool text is untrusted)."""
    print(printable(text))


def _init(args: argparse.Namespace) -> int:
    from spoolrender.config.settings import config_template
    from spoolrender.renderers.remotion import project_setup
    from spoolrender.spool.layout import init_spool

    project: Path | None = None
    if args.remotion_project is not None:
        project = args.remotion_project.expanduser().resolve()
        problem = project_setup.project_problem(project)
        if problem is not None:
            raise SpoolrenderError(f"--remotion-project: {problem}")
    layout = init_spool(_spool_path(args), group=args.group, config_text=config_template())
    print(f"spool ready at {printable(layout.root)}")
    _add_queues(layout.incoming, args.queue)
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


def _add_queues(incoming: Path, names: list[str]) -> None:
    from spoolrender.spool.queue_dirs import add_queue_dir

    for name in names:
        done = add_queue_dir(incoming, name)
        print(f"queue {name}: incoming/{name}/ {done} (mode 3775, the spool's group)")


def _spool(args: argparse.Namespace) -> Spool:
    from spoolrender.api import Spool

    return Spool(config=_config(args))


OPS_COMMANDS = {"list": list_command, "retry": retry_command, "rerun": rerun_command}


def dispatch(args: argparse.Namespace) -> int:
    if args.command in OPS_COMMANDS:  # list, retry, rerun (ops_commands.py)
        return OPS_COMMANDS[args.command](_config(args), args)
    return COMMANDS[args.command](args)


def _queue(args: argparse.Namespace) -> int:
    from spoolrender.spool.layout import SpoolLayout

    _add_queues(SpoolLayout(_config(args).spool).incoming, args.names)
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from spoolrender.runner.loop import Runner

    extra = {"slots": args.slots, "output_root": args.output_root, "watch": args.watch}
    config = _config(args, {**extra, "queues": comma_names(args.queues), "tags": comma_names(args.tags)})
    runner = Runner(
        config, drain=args.drain, metrics_textfile=args.metrics_textfile, runner_name=args.runner_name,
        max_jobs=args.max_jobs, max_runtime=args.max_runtime,
    )  # fmt: skip
    runner.install_signal_handlers()
    summary = _run_with_display(args, runner)
    return _run_exit_status(args, summary, config.output_root)


def _show(args: argparse.Namespace) -> int:
    from spoolrender.cli.show_text import format_description

    document = _spool(args).show(args.id)
    if args.json:
        print(json.dumps(document, indent=2, default=str))
    else:
        print("\n\n".join(format_description(info) for info in (document, *document["others"])))
    return EXIT_OK


def _cancel(args: argparse.Namespace) -> int:
    for line in _spool(args).cancel(args.id):
        _say(line)
    return EXIT_OK


def _pause(args: argparse.Namespace) -> int:
    marker = _spool(args).pause(args.reason)
    _say(f"paused: no runner claims new jobs until `spoolrender resume` ({marker})")
    return EXIT_OK


def _resume(args: argparse.Namespace) -> int:
    print("resumed" if _spool(args).resume() else "the spool was not paused")
    return EXIT_OK


def _unblock(args: argparse.Namespace) -> int:
    from spoolrender.hosts.health import unblock
    from spoolrender.spool.layout import SpoolLayout

    layout = SpoolLayout(_config(args).spool)
    layout.check()
    was = unblock(layout, args.host)
    print(f"host {printable(args.host)} " + ("unblocked: its runners claim again" if was else "was not blocked"))
    return EXIT_OK


def _purge(args: argparse.Namespace) -> int:
    if args.cache:
        if args.ids:
            raise SpoolrenderError("purge --cache takes no job ids (the render cache is not kept per job)")
        return _purge_cache(args)
    if args.ids:
        return _purge_jobs(args)
    if args.older_than is None:
        raise SpoolrenderError("purge needs --older-than DURATION (or --cache for the render cache)")
    states = (args.state,) if args.state else ("done", "failed")
    from spoolrender.ops.purge import purge_older

    purged = purge_older(_config(args), args.older_than, states, dry_run=args.dry_run)
    for entry in purged.removed:
        _say(entry)
    for entry, why in purged.kept:
        _say(f"{entry}: could not delete its record: {why} (kept)")
    print(f"{'would purge' if args.dry_run else 'purged'} {len(purged.removed)} job(s)"
          + (f"; {len(purged.kept)} could not be removed" if purged.kept else ""))  # fmt: skip
    return EXIT_ERROR if purged.kept else EXIT_OK


def _submit(args: argparse.Namespace) -> int:
    """Every file checked first, every problem of each listed; all queued only if all pass."""
    from spoolrender.ops import submission

    if args.name is not None and len(args.files) > 1:
        raise SpoolrenderError("--name names one job file; give it with a single FILE (or -)")
    if args.files.count("-") > 1:
        raise SpoolrenderError("standard input (-) can be read once; give - at most once")
    config = _config(args)
    ready: dict[str, Submission] = {}  # by source, in the order given
    refused = 0
    for source in args.files:
        try:
            data, name = submission.read_submission(source, args.name, config.max_job_bytes)
            prepared = submission.prepare(
                config, data, name, check=not args.no_check, props_check=not args.no_props_check
            )
        except JobInvalid as exc:
            refused += 1
            print_problems(f"{source}: job is invalid:", exc.problems)
            continue
        except SpoolrenderError as exc:
            refused += 1
            print(f"spoolrender: {printable(exc)}", file=sys.stderr)
            continue
        clash = next((other for other, s in ready.items() if _same_job(s, prepared)), None)
        if clash is not None:
            refused += 1
            what = f"incoming/{prepared.target.name}, id {prepared.job_id}"
            print(f"spoolrender: {printable(source)} and {printable(clash)} would be the same job ({printable(what)}); "
                  "give each its own name and id", file=sys.stderr)  # fmt: skip
            continue
        ready[source] = prepared
    if refused:
        counted = f": {refused} of {len(args.files)} files refused" if len(args.files) > 1 else ""
        print(f"nothing queued{counted}", file=sys.stderr)
        return EXIT_ERROR
    for prepared in ready.values():
        for warning in prepared.warnings:
            print(f"warning: {printable(warning)}", file=sys.stderr)
        _say(str(submission.write(prepared)))
    return EXIT_OK


def _same_job(a: Submission, b: Submission) -> bool:
    """Two files of one `submit` that would be one job file in incoming/, or one id."""
    return a.target == b.target or (a.job_id is not None and a.job_id == b.job_id)


def print_problems(heading: str, problems: list[str]) -> None:
    """A JobInvalid for people, on stderr: the heading, then one indented line per problem."""
    print(printable(heading), file=sys.stderr)
    for problem in problems:
        print(f"  {printable(problem)}", file=sys.stderr)


def _run_with_display(args: argparse.Namespace, runner: Runner) -> RunSummary:
    """``runner.run()``, under the live display when someone watches a terminal (cli/live_display.py)."""
    from spoolrender.cli.live_display import live_display, live_wanted
    from spoolrender.cli.log_output import route_logs

    if not live_wanted(sys.stdout, os.environ, refused=args.no_live):
        return runner.run()
    with live_display(runner.view, sys.stdout, sys.stderr, route_logs):
        return runner.run()


def _run_exit_status(args: argparse.Namespace, summary: RunSummary, output_root: Path) -> int:
    """The exit status of `run`: why it stopped, failures first for --drain (see --help)."""
    limit = {"max-jobs": EXIT_MAX_JOBS, "max-runtime": EXIT_MAX_RUNTIME}.get(summary.stopped_by)
    if args.drain or limit is not None:
        try:
            print(f"{summary.describe()} (outputs under {printable(output_root)})", flush=True)
        except BrokenPipeError:
            silence_stdout()  # a closed pipe must not turn a failed drain's status into 0
    if args.drain and summary.failed:
        return EXIT_JOBS_FAILED
    if summary.stopped_by == "spool-io":
        return EXIT_ERROR  # the spool's filesystem failed (full, read-only...): said in the log
    if limit is not None:
        return limit
    if args.drain and (summary.paused or summary.blocked) and not summary.claimed:
        return EXIT_PAUSED
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    from spoolrender.serve.listen import ServeOptions, parse_listen
    from spoolrender.serve.server import SpoolServer
    from spoolrender.spool.layout import SpoolLayout

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
    from spoolrender.cli.status_text import describe_usage, format_status
    from spoolrender.ops.progress_floor import ProgressFloor

    spool = _spool(args)
    if args.prometheus:
        from spoolrender.ops.metrics import spool_metrics_text

        sys.stdout.write(spool_metrics_text(spool.config))
        return EXIT_OK
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    stop = _stop_on_signals() if args.watch is not None else None
    floor = ProgressFloor()  # redraws never show a run's progress falling back (ops/progress_floor.py)
    while True:
        document = spool.status().document
        floor.hold_status(document)
        text = json.dumps(document, indent=2, sort_keys=True) if args.json else format_status(document, colour=colour)
        if not args.json:
            config = spool.config
            cache = describe_usage(config.output_root, config.render_cache_max_bytes)
            text += "" if cache is None else f"\n{cache}"
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


# Each command of cli/parser.py and cli/operator_parsers.py but the operator's list/retry/rerun (OPS_COMMANDS).
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "init": _init,
    "queue": _queue,
    "submit": _submit,
    "compositions": _compositions,
    "run": _run,
    "status": _status,
    "show": _show,
    "cancel": _cancel,
    "pause": _pause,
    "resume": _resume,
    "unblock": _unblock,
    "purge": _purge,
    "serve": _serve,
}
