"""Every setting of spoolrender.yaml, once: name, check, type, default and meaning.

This table is the only list of settings. :mod:`spoolrender.config.spool_config` takes each setting's
check and ``CONFIG_KEYS`` from it; ``spoolrender init`` writes :func:`config_template`
(every setting commented out, with its default and meaning); the documentation's
configuration reference is :func:`settings_reference_markdown` (an MkDocs hook inserts it
into docs/configuration.md). SpoolConfig's fields are declared with their types in
config/spool_config.py; a test checks that they and this table name the same settings.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spoolrender import defaults
from spoolrender.config import setting_checks as checks
from spoolrender.config.queues import ALL_QUEUES

# Sections, in the order the template and the reference list them.
SPOOL = "Spool and outputs"
RUNNERS = "Runners, leases and queues"
RETRIES = "Attempts, retries and host health"
CAPACITY = "Capacity"
RENDERERS = "Renderers and projects"
JOB_CAPS = "Limits on what a job file may ask for"
RENDER_CACHE = "Render cache"
CHUNKS = "Chunked rendering"
HOOKS = "Completion hooks"
SERVE = "HTTP API and dashboard (spoolrender serve)"
RETENTION = "Retention of finished jobs"
SECTIONS = (SPOOL, RUNNERS, RETRIES, CAPACITY, RENDERERS, JOB_CAPS, RENDER_CACHE, CHUNKS, HOOKS, SERVE, RETENTION)

# Documentation pages a setting's meaning refers to (page under docs/, and its title).
DOC_PAGES = {
    "uploads.md": "Uploads and network filesystems",
    "reliability.md": "Reliability guarantees",
    "job-files.md": "Job files",
    "projects.md": "Remotion projects",
    "render-cache.md": "Render cache",
    "chunked-rendering.md": "Chunked rendering",
    "hooks.md": "Completion hooks",
    "operations.md": "Commands, status and queues",
    "hosts.md": "Several hosts",
    "dashboard.md": "Dashboard and HTTP API",
}
_NAME = re.compile(r"[a-z][a-z0-9_]*")
TEMPLATE_WIDTH = 88


@dataclass(frozen=True)
class Setting:
    """One key of spoolrender.yaml.

    ``default_text`` is the default as it is written in spoolrender.yaml (``null``: unset);
    ``example`` is YAML lines of a typical value, for settings whose default shows nothing.
    """

    name: str
    section: str
    check: Callable[[str, Any], Any]
    type_text: str
    default_text: str
    meaning: str
    see: str | None = None
    example: str | None = None

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"setting name {self.name!r}: lower-case letters, digits and _")
        if self.section not in SECTIONS:
            raise ValueError(f"{self.name}: unknown section {self.section!r}")
        if self.see is not None and self.see.split("#")[0] not in DOC_PAGES:
            raise ValueError(f"{self.name}: unknown documentation page {self.see!r}")
        if not self.meaning.endswith(".") or "|" in self.meaning + self.type_text:
            raise ValueError(f"{self.name}: a meaning is sentences, without '|' (a table cell)")


def _g(number: float) -> str:
    return f"{number:g}"


# fmt: off
# A table: one row per setting reads better than one argument per line.
SETTINGS: tuple[Setting, ...] = (
    # --- spool and outputs ---------------------------------------------------------------
    Setting("output_root", SPOOL, checks.file_path, "path", defaults.OUTPUT_ROOT,
        "Where finished outputs are published, each at the path its job names, with the "
        "scratch directory `.spoolrender-tmp/` inside it (so that publishing is one rename).",
    ),
    Setting("watch", SPOOL, checks.watch_mode, "`auto`, `inotify` or `polling`", "auto",
        "How runners notice new job files: `inotify` events, or `polling` the directories "
        "every `poll_seconds`. `auto` polls on NFS, CIFS, FUSE and other network filesystems, "
        "where inotify sees nothing written by other hosts.",
        see="uploads.md",
    ),
    Setting("settle_seconds", SPOOL, checks.non_negative_number, "seconds >= 0", _g(defaults.SETTLE_S),
        "A job file unchanged this long counts as completely uploaded where no local writer "
        "check or close event can tell (writers on other hosts). On a network mount it is "
        "judged as the server sees the file: each settled upload is revalidated past the "
        "client's caches before its claim.",
        see="uploads.md",
    ),
    Setting("poll_seconds", SPOOL, checks.positive_number, "seconds > 0", _g(defaults.POLL_INTERVAL_S),
        "How often a polling runner lists the spool.",
    ),
    Setting("rescan_seconds", SPOOL, checks.positive_number, "seconds > 0", _g(defaults.RESCAN_INTERVAL_S),
        "A full listing and recovery sweep at least this often, even without events.",
    ),
    Setting("fsync", SPOOL, checks.boolean, "`true` or `false`", "true",
        "fsync every acknowledged change (a submitted job, a state move, a record) before "
        "saying it is done. `false` is faster on throwaway spools (tests, benchmarks), but a "
        "power cut may lose submitted jobs or finished states.",
        see="reliability.md",
    ),
    # --- runners, leases and queues ------------------------------------------------------
    Setting("heartbeat_seconds", RUNNERS, checks.positive_number, "seconds > 0", _g(defaults.HEARTBEAT_INTERVAL_S),
        "How often a running job's heartbeat file is rewritten.",
    ),
    Setting("lease_seconds", RUNNERS, checks.positive_number, "seconds > 0", _g(defaults.LEASE_S),
        "A heartbeat unchanged this long (on the observer's clock) means its runner is dead: "
        "any runner of the spool puts the job back. At least twice `heartbeat_seconds`.",
        see="reliability.md",
    ),
    Setting("grace_seconds", RUNNERS, checks.non_negative_number, "seconds >= 0", _g(defaults.GRACE_S),
        "On SIGTERM, how long running jobs may go on before they are stopped and put back.",
    ),
    Setting("queues", RUNNERS, checks.names("queue", allow_all=True), "list of queue names", f'["{ALL_QUEUES}"]',
        f"The queues a runner serves, in order of preference; `{ALL_QUEUES}` is every queue not "
        "named (`run --queues`).",
        see="operations.md",
    ),
    Setting("tags", RUNNERS, checks.names("tag", allow_all=False), "list of tag names", "[]",
        "This runner's tags: a job that `requires:` a tag goes only to runners that have it (`run --tags`).",
        see="operations.md",
    ),
    # --- attempts, retries and host health -----------------------------------------------
    Setting("max_attempts", RETRIES, checks.positive_int, "whole number >= 1", str(defaults.DEFAULT_MAX_ATTEMPTS),
        "Attempts of a job that does not say (its `max_attempts:`) before it fails for good.",
    ),
    Setting("timeout_seconds", RETRIES, checks.positive_number, "seconds > 0", _g(defaults.DEFAULT_TIMEOUT_S),
        "Time one attempt of a job that does not say (its `timeout:`) may take.",
    ),
    Setting("backoff_base_seconds", RETRIES, checks.non_negative_number, "seconds >= 0", _g(defaults.BACKOFF_BASE_S),
        "The wait before the first retry; it doubles with every attempt, with jitter, up to `backoff_cap_seconds`.",
    ),
    Setting("backoff_cap_seconds", RETRIES, checks.non_negative_number, "seconds >= 0", _g(defaults.BACKOFF_CAP_S),
        "The longest wait between retries (at least `backoff_base_seconds`).",
    ),
    Setting(
        "retry_elsewhere_seconds", RETRIES, checks.non_negative_number, "seconds >= 0",
        _g(defaults.RETRY_ELSEWHERE_S),
        "After a transient failure on a host, that host's runners leave the retry to other "
        "online hosts this long (0: no preference).",
        see="hosts.md",
    ),
    Setting("host_block_jobs", RETRIES, checks.positive_int, "whole number >= 1", str(defaults.HOST_BLOCK_JOBS),
        "This many different jobs failing on one host within `host_block_window_seconds` "
        "block the host for `host_block_seconds`: its runners claim only one job at a time as a "
        "probe, and a probe done lifts the block. Kills, a job's own out-of-memory and failures "
        "seen the same way on another host do not count.",
        see="hosts.md",
    ),
    Setting(
        "host_block_window_seconds", RETRIES, checks.positive_number, "seconds > 0",
        _g(defaults.HOST_BLOCK_WINDOW_S),
        "The window in which `host_block_jobs` failures block a host.",
        see="hosts.md",
    ),
    Setting("host_block_seconds", RETRIES, checks.positive_number, "seconds > 0", _g(defaults.HOST_BLOCK_S),
        "How long a host stays blocked (`spoolrender unblock HOST` ends it sooner).",
        see="hosts.md",
    ),
    Setting("host_block_max_share", RETRIES, checks.share, "number from 0 to 1", _g(defaults.HOST_BLOCK_MAX_SHARE),
        "The largest share of the online hosts a block may apply to (rounded down; 0.5: one of "
        "two or three, two of four or five). A block never applies to the last online host of a "
        "queue either: it is shown as held back, with the cause.",
        see="hosts.md",
    ),
    Setting("host_probe_seconds", RETRIES, checks.non_negative_number, "seconds >= 0", _g(defaults.HOST_PROBE_S),
        "A blocked host claims one job as a probe this long after its block began, and again "
        "this long after each failed probe.",
        see="hosts.md",
    ),
    # --- capacity ------------------------------------------------------------------------
    Setting("slots", CAPACITY, checks.optional_count, "whole number >= 1, or `auto`", "auto",
        "Jobs one runner renders at once. `auto`: the smaller of usable cores x "
        "`slots_per_core` / `threads_per_job` and available memory / `memory_per_job_mb`.",
    ),
    Setting("slots_per_core", CAPACITY, checks.positive_number, "number > 0", _g(defaults.SLOTS_PER_CORE),
        "Automatic slots per usable core: a Remotion render leaves its core idle about a "
        "third of the time, so two jobs per core finish the most work (bench/concurrency.py).",
    ),
    Setting("threads_per_job", CAPACITY, checks.positive_int, "whole number >= 1", str(defaults.THREADS_PER_JOB),
        "Threads one job may use (Remotion's `concurrency`); with `slots` set, capped so "
        "that slots x threads is at most the cores.",
    ),
    Setting(
        "memory_per_job_mb", CAPACITY, checks.positive_int, "whole number >= 1 (MiB)",
        str(defaults.MEMORY_PER_JOB_MB),
        "Memory one job is expected to use (Node worker, Chromium, ffmpeg), for the automatic "
        "slot count and the automatic `max_job_frame_pixels`.",
    ),
    Setting("warm_projects", CAPACITY, checks.positive_int, "whole number >= 1", str(defaults.WARM_PROJECTS_PER_SLOT),
        "Warm Remotion workers (one per project, each with its Chromium) a job slot keeps; "
        "the least recently used stops when a job of another project needs one more.",
        see="projects.md",
    ),
    # --- renderers and projects ----------------------------------------------------------
    Setting("remotion_project", RENDERERS, checks.file_path, "path", defaults.REMOTION_PROJECT,
        "The Remotion project jobs render with unless they name another (`project:`). "
        "`spoolrender init` records the one it finds or is given.",
        see="projects.md",
    ),
    Setting("projects", RENDERERS, checks.projects, "mapping: name to path", "{}",
        "Further Remotion projects by name (a job picks one with `project:`).",
        see="projects.md",
        example="projects:\n  promo: /srv/video/promo",
    ),
    Setting("browser_executable", RENDERERS, checks.non_empty_string, "path", defaults.BROWSER_EXECUTABLE,
        "The Chromium that Remotion drives (never downloaded).",
    ),
    Setting("cache_dir", RENDERERS, checks.file_path, "path", "~/.cache/spoolrender",
        "The Remotion bundle cache, shared by every runner of the host. Unlike the other paths, "
        "a relative one is relative to the runner's working directory, not to the spool.",
    ),
    Setting("commands", RENDERERS, checks.commands, "mapping: name to argv list", "{}",
        "Commands for `renderer: command` jobs, as argv lists (never a shell string), with "
        "placeholders such as `{output}`, `{props_file}` and `{job_id}`.",
        see="job-files.md",
        example='commands:\n  slate: [ffmpeg, -y, -f, lavfi, -i, "color=c=black:s=1280x720:d=2", "{output}"]',
    ),
    # --- limits on what a job file may ask for -------------------------------------------
    Setting("max_job_bytes", JOB_CAPS, checks.positive_int, "whole number >= 1 (bytes)", str(defaults.MAX_JOB_BYTES),
        "Larger job files fail unread.",
    ),
    Setting("max_job_attempts", JOB_CAPS, checks.optional_count, "whole number >= 1, or `auto`", "auto",
        f"The most attempts a job may ask for. `auto`: {defaults.MAX_JOB_ATTEMPTS}, or "
        "`max_attempts` if that is higher; set explicitly, `max_attempts` must fit under it.",
    ),
    Setting("max_job_timeout_seconds", JOB_CAPS, checks.optional_seconds, "seconds > 0, or `auto`", "auto",
        f"The longest timeout a job may ask for (its `timeout:`). `auto`: {_g(defaults.MAX_JOB_TIMEOUT_S)}, or "
        "`timeout_seconds` if that is higher; set explicitly, `timeout_seconds` must fit under it.",
    ),
    Setting("max_job_frames", JOB_CAPS, checks.positive_int, "whole number >= 1", str(defaults.MAX_JOB_FRAMES),
        "The most frames one Remotion render may have (the default is 1 hour at 30 fps).",
    ),
    Setting("max_job_frame_pixels", JOB_CAPS, checks.optional_count, "whole number >= 1, or `auto`", "auto",
        "The most pixels of one rendered frame (width x height x scale squared). `auto`: "
        f"`memory_per_job_mb` MiB / {defaults.BYTES_PER_FRAME_PIXEL} bytes (16.7 megapixels "
        "for 1024).",
    ),
    # --- render cache --------------------------------------------------------------------
    Setting("render_cache", RENDER_CACHE, checks.boolean, "`true` or `false`", str(defaults.RENDER_CACHE).lower(),
        "Publish a job identical to an earlier render from the render cache instead of "
        "rendering it again; a job's `cache:` overrides it. Only for pure compositions "
        "(no data fetched, no clock read).",
        see="render-cache.md",
    ),
    Setting(
        "render_cache_max_bytes", RENDER_CACHE, checks.byte_size, "size: bytes, or `500M`, `10G`, `2T`",
        f"{defaults.RENDER_CACHE_MAX_BYTES // 1024**3}G",
        "The render cache's size cap; the least recently used entries go past it.",
        see="render-cache.md",
    ),
    # --- chunked rendering ---------------------------------------------------------------
    Setting("split_seconds", CHUNKS, checks.split_seconds, "seconds > 0, or `off`", "off",
        "Also split jobs that do not ask (`chunks:`) when their video is longer than this many "
        "seconds and more than one slot is idle.",
        see="chunked-rendering.md",
    ),
    Setting("command_chunks", CHUNKS, checks.as_given, "mapping: command name to span, chunk, join", "{}",
        "For a command of `commands:`, the `span`, `chunk` and `join` argv templates that let "
        "its jobs be split into frame ranges and joined.",
        see="chunked-rendering.md",
        example=(
            "command_chunks:\n"
            "  slate:\n"
            '    span: [/usr/local/bin/slate-frames, "{props_file}"]\n'
            '    chunk: [/usr/local/bin/slate-render, "{props_file}", "{first}", "{last}", "{output}"]\n'
            '    join: [/usr/local/bin/slate-join, "{parts_file}", "{output}"]'
        ),
    ),
    # --- completion hooks ----------------------------------------------------------------
    Setting("hooks", HOOKS, checks.as_given, "mapping: name to hook", "{}",
        "Commands and webhooks run when a job is done, will be retried, or failed for good; "
        "each with `on:` (events), `command:` or `url:`, and optionally `secret_file:`, "
        "`timeout_seconds:`, `attempts:`, `backoff_seconds:`.",
        see="hooks.md",
        example=(
            "hooks:\n"
            "  chat:\n"
            "    on: [failed]\n"
            "    url: https://chat.example/hooks/render\n"
            "    secret_file: /etc/spoolrender/hook-secret\n"
            "  archive:\n"
            "    on: [done]\n"
            "    command: [/usr/local/bin/archive-video]"
        ),
    ),
    # --- spoolrender serve ---------------------------------------------------------------
    Setting("serve_token_file", SERVE, checks.optional_path, "path", "null",
        "A file whose first line is the secret that enables `spoolrender serve`'s write actions "
        "(submit, retry, cancel); unset, the API is read-only. `serve` refuses a file that others "
        "may access or its group may write, and a group-readable one whose group is the spool's or has "
        "other members (`chmod 600`; 640 only with a group of its own that has no other members).",
        see="dashboard.md",
        example="serve_token_file: /etc/spoolrender/serve-token",
    ),
    Setting("serve_token", SERVE, checks.optional_token, "string, 16 characters or more", "null",
        "The same secret written here instead; `serve` refuses it while spoolrender.yaml is "
        "readable by other users. Prefer `serve_token_file`.",
        see="dashboard.md",
    ),
    # --- retention -----------------------------------------------------------------------
    Setting("keep_done", RETENTION, checks.duration_or_off, "duration (`30d`, `12h`), or `off`", "off",
        "Runners forget done jobs whose record is older than this (in the background, one "
        "purger per spool at a time, as `spoolrender purge` does: outputs are never touched). "
        "The unit is required.",
        see="operations.md#retention",
        example="keep_done: 30d",
    ),
    Setting("keep_failed", RETENTION, checks.duration_or_off, "duration (`90d`, `12h`), or `off`", "off",
        "The same for failed jobs.",
        see="operations.md#retention",
        example="keep_failed: 90d",
    ),
    Setting("keep_done_max", RETENTION, checks.count_or_off, "whole number >= 1, or `off`", "off",
        "Keep at most this many done jobs: the oldest beyond it are forgotten, whatever their age.",
        see="operations.md#retention",
        example="keep_done_max: 100000",
    ),
    Setting("keep_failed_max", RETENTION, checks.count_or_off, "whole number >= 1, or `off`", "off",
        "The same for failed jobs.",
        see="operations.md#retention",
        example="keep_failed_max: 20000",
    ),
)
# fmt: on

SETTINGS_BY_NAME = {s.name: s for s in SETTINGS}


def _default_cell(setting: Setting) -> str:
    return {"null": "unset", "{}": "none", "[]": "none"}.get(setting.default_text, f"`{setting.default_text}`")


def settings_reference_markdown() -> str:
    """The configuration reference: a Markdown table of every setting (setting, type,
    default, meaning), in the order of the sections; links are relative to docs/."""
    rows = ["| setting | type | default | meaning |", "|---|---|---|---|"]
    for section in SECTIONS:
        for s in SETTINGS:
            if s.section != section:
                continue
            see = f" See [{DOC_PAGES[s.see.split('#')[0]]}]({s.see})." if s.see else ""
            rows.append(f"| `{s.name}` | {s.type_text} | {_default_cell(s)} | {s.meaning}{see} |")
    return "\n".join(rows) + "\n"


_TEMPLATE_HEAD = """\
# spoolrender.yaml: the configuration of this spool. Every host and command that uses
# the spool reads this file, so all of them agree.
#
# Every setting is optional and shown here commented out with its default: to change
# one, delete the "#" in front of its name and edit the value. SPOOLRENDER_<SETTING>
# environment variables (SPOOLRENDER_SLOTS=4) and `--set setting=value` override this
# file. Relative paths are relative to this spool directory (cache_dir excepted).
# Values are YAML 1.2: on, off, yes and no are words; true and false are booleans.
# Reference: docs/configuration.md.
"""


def _comment(text: str) -> list[str]:
    return textwrap.wrap(text, TEMPLATE_WIDTH, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False)


def config_template() -> str:
    """The commented spoolrender.yaml that ``spoolrender init`` writes: loaded as it is, or
    with every setting line (``#name: ...``) uncommented, it gives the defaults."""
    lines = [_TEMPLATE_HEAD.rstrip("\n")]
    for section in SECTIONS:
        lines += ["", f"# --- {section} ".ljust(TEMPLATE_WIDTH, "-")]
        for s in SETTINGS:
            if s.section != section:
                continue
            see = f" See docs/{s.see}." if s.see else ""
            lines += ["", *_comment(f"{s.meaning}{see}".replace("`", ""))]
            if s.example is not None:
                lines += ["# For example:", *(f"#   {line}" for line in s.example.splitlines())]
            lines.append(f"#{s.name}: {s.default_text}  # {s.type_text.replace('`', '')}")
    return "\n".join(lines) + "\n"
