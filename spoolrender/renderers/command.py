"""The generic command renderer: runs an argv template from the spool config.

Job files choose a command by *name* (``renderer: command``, ``command: slate``); only
the spool config defines argv templates, so a job file can never run arbitrary programs.
The argv is executed directly, never through a shell; placeholders are substituted as
whole values, so nothing a job contains can become shell syntax or an extra argument.

Placeholders: ``{output}`` (the file to write), ``{job_file}``, ``{props_file}`` (the
job's props as JSON), ``{work_dir}`` (scratch, also TMPDIR), ``{threads}``, ``{job_id}``,
``{attempt}``; the last three also as ``$SPOOLRENDER_THREADS``, ``$SPOOLRENDER_JOB_ID``,
``$SPOOLRENDER_ATTEMPT`` (for a job that uses the render cache only when the templates
name them: see :meth:`CommandRenderer.cache_key`).

Chunked rendering (docs/chunked-rendering.md): a command with a ``command_chunks:``
entry in the spool config can be split (``chunks: N`` in the job, or ``split_seconds``):

- ``span`` prints ``FRAMES <first> <last> <fps>`` (the whole job's frames, inclusive);
- ``chunk`` renders frames ``{first}``..``{last}`` (chunk ``{index}`` of ``{count}``,
  from 0) into ``{output}``, then an existing empty *directory*, with any files it likes;
- ``join`` writes ``{output}`` (one file) from ``{parts_file}``: one line per chunk, in
  order, ``<first> <last> <chunk directory>``; ``{first}``/``{last}`` are the whole
  span's, ``{count}`` the number of chunks. The join command checks what it joins
  (contiguity, format): the runner only checks that it wrote a non-empty file.

Contract: exit 0 after writing ``{output}``. Print ``PROGRESS 0.42`` (or ``PROGRESS 42%``)
lines on stdout to report progress. Exit 75 (EX_TEMPFAIL) for "try again later"; any
other sysexits code 64-78 means "this job is wrong" and fails it without retrying;
other codes and deaths by signal are retried.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import threading
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from spoolrender import defaults
from spoolrender.config.command_chunks import CommandChunks
from spoolrender.config.spool_config import ENV_PREFIX, SpoolConfig
from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import RenderCancelled, RenderError
from spoolrender.render_cache.keys import FileDigests, digest_of, sha256_file
from spoolrender.renderers.base import (
    KILLED,
    CancelToken,
    FrameSpan,
    JoinRequest,
    ProgressFn,
    RenderRequest,
    RenderResult,
    WholeRendersOnly,
    killing_signal,
    terminate_group,
)
from spoolrender.renderers.run_log import RunLogLines

log = logging.getLogger(__name__)

PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
PROGRESS_LINE = re.compile(r"PROGRESS\s+([0-9]*\.?[0-9]+)(%?)\s*")
FRAMES_LINE = re.compile(r"FRAMES\s+(\d+)\s+(\d+)\s+([0-9]*\.?[0-9]+)")
# The placeholders whose values differ between identical jobs (or hosts), and the
# environment variables that carry the same values (cache_key, _environment).
JOB_VARIABLES = {"job_id": "SPOOLRENDER_JOB_ID", "attempt": "SPOOLRENDER_ATTEMPT", "threads": "SPOOLRENDER_THREADS"}
EX_TEMPFAIL = 75
SYSEXITS = range(64, 79)


def expand_argv(template: tuple[str, ...], values: dict[str, str]) -> list[str]:
    def sub(match: re.Match[str]) -> str:
        return values[match.group(1)]

    return [PLACEHOLDER.sub(sub, arg) for arg in template]


class CommandRenderer(WholeRendersOnly):
    name = "command"

    def __init__(self, config: SpoolConfig) -> None:
        self._config = config
        self._digests = FileDigests()

    def cache_key(self, request: RenderRequest) -> str | None:
        """Everything the command can see, but the paths of the run's own scratch files.

        The command's argv templates (its ``commands:`` entry and, when it has one, its
        ``command_chunks:`` span, chunk and join), the content of the files they name
        (argv[0], found on PATH as the render would find it, and every other argument that
        is an absolute path to an existing file, read once per version: FileDigests), the
        props and the output's suffix. ``{job_file}`` brings in the job file's bytes.
        Values that differ between identical jobs (the id, the attempt, the thread count)
        are given to a cached command only when its templates name them, as placeholder
        and as ``$SPOOLRENDER_JOB_ID``/``_ATTEMPT``/``_THREADS`` alike, and are then in
        the key (such a job matches only jobs with the same value); otherwise the command
        sees none of them and no other ``SPOOLRENDER_*`` variable (:meth:`_environment`).
        Not keyed: the rest of the runner's environment and files the program opens on
        its own; a command whose output depends on those must not be cached
        (docs/render-cache.md). Cost: a stat per named file, and reading the job file when
        a template names it.
        """
        name = request.spec.command
        if name is None or name not in self._config.commands:
            return None  # render() fails the job with the reason
        templates = self._templates(name)
        files: dict[str, str | None] = {}
        for template in templates.values():
            for index, arg in enumerate(template):
                if PLACEHOLDER.search(arg):
                    continue
                found = shutil.which(arg) if index == 0 and os.sep not in arg else arg
                if found is None or not os.path.isabs(found) or not os.path.isfile(found):
                    if index == 0:
                        files[arg] = None  # not installed: the render fails and nothing is stored
                    continue
                files[arg] = self._digests.of(Path(found))
        parts = {
            "renderer": "command",
            "argv": {kind: list(template) for kind, template in templates.items()},
            "files": files,
            "props": request.props,
            "output_suffix": request.output.suffix,
            **{k: v for k, v in _job_values(request, request.attempt).items() if k in self._named(name)},
        }
        if "job_file" in self._named(name):
            parts["job_file"] = sha256_file(request.job_file)
        return digest_of(parts)

    def _templates(self, name: str) -> dict[str, tuple[str, ...]]:
        """Every argv template of command ``name``: the whole render's, and its chunked ones."""
        templates = {"whole": self._config.commands[name]}
        chunked = self._config.command_chunks.get(name)
        if chunked is not None:
            templates.update(span=chunked.span, chunk=chunked.chunk, join=chunked.join)
        return templates

    def _named(self, name: str) -> set[str]:
        """The placeholders command ``name``'s templates use."""
        return {m.group(1) for template in self._templates(name).values() for arg in template
                for m in PLACEHOLDER.finditer(arg)}  # fmt: skip

    def _environment(self, name: str, request: RenderRequest | JoinRequest, attempt: int) -> dict[str, str]:
        """The command's environment: the runner's, TMPDIR, and the job's values.

        A command whose job uses the render cache sees a value that differs between
        identical jobs only when its templates name it (then the key holds it), and no
        other ``SPOOLRENDER_*`` variable (the runner's own settings, which differ between
        hosts that share entries): else an identical job of another id could be served an
        output made from this job's id or attempt.
        """
        env = {**os.environ, "TMPDIR": str(request.work_dir / "tmp")}
        shown: Iterable[str] = JOB_VARIABLES
        if request.spec.uses_cache(self._config):
            env = {k: v for k, v in env.items() if not k.startswith(ENV_PREFIX)}
            shown = JOB_VARIABLES.keys() & self._named(name)
        values = _job_values(request, attempt)
        return {**env, **{JOB_VARIABLES[placeholder]: str(values[placeholder]) for placeholder in shown}}

    def _values(self, request: RenderRequest | JoinRequest, attempt: int) -> dict[str, str]:
        props_file = request.work_dir / "props.json"
        props_file.write_text(json.dumps(request.props), encoding="utf-8")
        # A join's request names no job file: it lies beside the run's log, in the job's directory.
        job_file = request.log.parent / defaults.JOB_FILENAME if isinstance(request, JoinRequest) else request.job_file
        if request.spec.uses_cache(self._config):
            # The job's own path names its id (running/<id>.<uid>.<token>/): a cached command
            # is given a copy in its scratch directory, whose name is opaque (publish.scratch_name).
            copy = request.work_dir / defaults.JOB_FILENAME
            shutil.copyfile(job_file, copy)
            job_file = copy
        return {
            "job_file": str(job_file),
            "props_file": str(props_file),
            "work_dir": str(request.work_dir),
            "threads": str(request.threads),
            "job_id": request.spec.id,
            "attempt": str(attempt),
        }

    def render(self, request: RenderRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult:
        name = self._command_name(request.spec.command)
        values = {**self._values(request, request.attempt), "output": str(request.output)}
        template = self._config.commands[name]
        if request.chunk is not None:
            template = self._chunked(name).chunk
            part = request.chunk
            values.update(first=str(part.first), last=str(part.last), index=str(part.index), count=str(part.count))
        self._run(name, expand_argv(template, values), request, request.attempt, progress, cancel)
        return RenderResult(details={"command": name, "exit_code": 0})

    def verify(self, request: RenderRequest, result: RenderResult) -> None:
        if request.chunk is None:
            verify_nonempty(request.output)
            return
        try:
            empty = not any(request.output.iterdir())
        except OSError as exc:
            why = f"the chunk's directory cannot be read: {exc.strerror}"
            raise RenderError(why, transient=True, kind=FailureKind.NO_OUTPUT) from exc
        if empty:
            raise RenderError(
                "the command reported success but wrote no chunk files", transient=True, kind=FailureKind.NO_OUTPUT
            )

    def close(self) -> None:
        pass

    # --- chunked rendering (``command_chunks:`` in the spool config) ---------------------

    def split_refusal(self, request: RenderRequest) -> str | None:
        name = request.spec.command
        if name is None or name not in self._config.command_chunks:
            return f"command {name!r} has no command_chunks entry (span, chunk, join) in the spool config"
        return None

    def frame_span(self, request: RenderRequest, cancel: CancelToken) -> FrameSpan:
        name = self._command_name(request.spec.command)
        request.work_dir.mkdir(parents=True, exist_ok=True)
        argv = expand_argv(self._chunked(name).span, self._values(request, request.attempt))
        tail = self._run(name, argv, request, request.attempt, _no_progress, cancel)
        for line in reversed(tail):
            m = FRAMES_LINE.fullmatch(line.strip())
            if m:
                try:
                    return FrameSpan(int(m.group(1)), int(m.group(2)), float(m.group(3)))
                except ValueError as exc:
                    raise RenderError(
                        f"command {name!r} span: {exc}", transient=False, kind=FailureKind.CONFIG
                    ) from exc
        raise RenderError(
            f"command {name!r} span printed no line 'FRAMES <first> <last> <fps>'",
            transient=False,
            kind=FailureKind.CONFIG,
        )

    def join(self, request: JoinRequest, progress: ProgressFn, cancel: CancelToken) -> RenderResult:
        name = self._command_name(request.spec.command)
        parts_file = request.work_dir / "parts.txt"
        # One line per chunk, in order: its frames and its directory (paths are ours:
        # scratch and store names contain no newline).
        parts_file.write_text("".join(f"{p.first} {p.last} {d}\n" for p, d in request.parts), encoding="utf-8")
        values = {
            **self._values(request, 0),
            "output": str(request.output),
            "parts_file": str(parts_file),
            "first": str(request.span.first),
            "last": str(request.span.last),
            "count": str(len(request.parts)),
        }
        self._run(name, expand_argv(self._chunked(name).join, values), request, 0, progress, cancel)
        return RenderResult(details={"command": name, "joined": len(request.parts)})

    def verify_join(self, request: JoinRequest, result: RenderResult) -> None:
        # The join command itself checks what it joins (it knows the format); here: a file.
        verify_nonempty(request.output)

    # --- running one command ------------------------------------------------------------

    def _command_name(self, name: str | None) -> str:
        if name is None or name not in self._config.commands:
            raise RenderError(f"command {name!r} is not in the spool config", transient=False, kind=FailureKind.CONFIG)
        return name

    def _chunked(self, name: str) -> CommandChunks:
        try:
            return self._config.command_chunks[name]
        except KeyError:
            raise RenderError(
                f"command {name!r} has no command_chunks entry in the spool config",
                transient=False,
                kind=FailureKind.CONFIG,
            ) from None

    def _run(
        self,
        name: str,
        argv: list[str],
        request: RenderRequest | JoinRequest,
        attempt: int,
        progress: ProgressFn,
        cancel: CancelToken,
    ) -> deque[str]:
        """Run ``argv`` to its end; the last lines it printed, or RenderError/RenderCancelled."""
        (request.work_dir / "tmp").mkdir(parents=True, exist_ok=True)
        env = self._environment(name, request, attempt)
        tail: deque[str] = deque(maxlen=20)
        with open(request.log, "ab") as log_fh:
            log_fh.write(f"$ {' '.join(argv)}\n".encode())
            log_fh.flush()
            try:
                # A new session: the command and everything it spawns share one process
                # group, so a timeout or cancel can stop the whole tree with killpg.
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    cwd=request.work_dir,
                    env=env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise RenderError(
                    f"command {name!r} could not start: {argv[0]}: {exc.strerror}",
                    transient=False,
                    kind=FailureKind.CONFIG,
                ) from exc
            request.on_spawn(proc.pid)  # start_new_session: the pid is the group id
            assert proc.stdout is not None
            reader = threading.Thread(
                target=_pump,
                args=(proc.stdout, log_fh, tail, progress),
                name=f"cmd-{request.spec.id}",
                daemon=True,
            )
            reader.start()
            try:
                while True:
                    try:
                        proc.wait(timeout=0.1)
                        break
                    except subprocess.TimeoutExpired:
                        if cancel.is_set():
                            raise RenderCancelled(cancel.reason or "cancelled") from None
            finally:
                # Also after a normal exit: whatever the command left running in its
                # group (a daemonised helper) must not outlive the job.
                terminate_group(proc, defaults.KILL_GRACE_S)
                reader.join(timeout=5)
                proc.stdout.close()
                request.on_spawn(None)
        code = proc.returncode
        if code == 0:
            return tail
        last = next((line for line in reversed(tail) if line.strip()), "")
        why = (
            f"command {name!r} exited with status {code}" if code > 0 else f"command {name!r} killed by signal {-code}"
        )
        message = f"{why}: {last}" if last else why
        transient = not (code in SYSEXITS and code != EX_TEMPFAIL)
        if killing_signal(code) is not None:  # an operator's kill or the OOM killer, not a failure of its own
            raise RenderError(message, transient=True, kind=KILLED)
        raise RenderError(message, transient=transient, kind=FailureKind.COMMAND_EXIT)


def _job_values(request: RenderRequest | JoinRequest, attempt: int) -> dict[str, str | int]:
    """The values of the placeholders that differ between identical jobs."""
    return {"job_id": request.spec.id, "attempt": attempt, "threads": request.threads}


def _no_progress(fraction: float | None, stage: str | None = None) -> None:
    pass


def verify_nonempty(path: Path) -> None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise RenderError(
            f"the renderer reported success but wrote no file at {path.name}",
            transient=True,
            kind=FailureKind.NO_OUTPUT,
        ) from None
    if size == 0:
        raise RenderError(
            "the renderer reported success but the output is empty", transient=True, kind=FailureKind.NO_OUTPUT
        )


def _pump(stream: IO[bytes], log_fh: IO[bytes], tail: deque[str], progress: ProgressFn) -> None:
    log_lines = RunLogLines(log_fh)
    for raw in stream:
        # The spool full or failing loses lines of the log, never the reading: the command
        # would block on a full pipe and never end (run_log.py).
        log_lines.write(raw)
        line = raw.decode("utf-8", "replace").rstrip("\n")
        m = PROGRESS_LINE.fullmatch(line.strip())
        if m:
            value = float(m.group(1))
            progress(min(1.0, value / 100 if m.group(2) else value), "rendering")
        else:
            tail.append(line[:500])
