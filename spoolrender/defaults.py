"""Every default value of spoolrender, named, in one place.

The spool config file, ``SPOOLRENDER_*`` environment variables and CLI flags override
the configurable ones (see :mod:`spoolrender.config.spool_config`); the rest are protocol constants
that every host sharing a spool must agree on.
"""

from __future__ import annotations

from spoolrender.core.retry_policy import RetryPolicy
from spoolrender.core.vocabulary import FailureKind, JobState

# --- spool layout (protocol: every host must agree) ---------------------------------
# Plain strings (argparse shows choices by repr; serve and status use them as JSON keys).
STATE_DIRS = tuple(s.value for s in JobState)  # incoming, running, retry, done, failed, split
# States a spool made by an older version may lack: created when first needed.
OPTIONAL_STATE_DIRS = (JobState.SPLIT.value,)
PRIVATE_DIR = ".spoolrender"  # staging for atomic writes, id reservations, runners
CONFIG_FILENAME = "spoolrender.yaml"
JOB_FILENAME = "job.yaml"  # the runner-owned, read-only private copy of the claimed bytes (intake/owncopy.py)
SUBMITTED_FILENAME = "submitted.yaml"  # the submitter's own file after the claim: evidence only
# Runs of one job discarded because its submitter's file was still being appended to at the
# decision (a remote upload the intake could not see): after that many the job decides from
# its private copy (intake/owncopy.py), so no writer can keep a job from ending.
MAX_UPLOAD_DISCARDS = 3
HEARTBEAT_FILENAME = "heartbeat"
LOCK_FILENAME = "lock"
RESULT_FILENAME = "result.json"  # written into done/<job>/
FAILURE_FILENAME = "failure.json"  # written into failed/<job>/
CANCEL_FILENAME = "cancel"  # `spoolrender cancel` asks a running job's owner to stop
PAUSE_FILENAME = "paused"  # in .spoolrender/: no runner claims while it exists
# Names in incoming/ that are never claimed: in-progress uploads by convention.
IGNORED_PREFIXES = (".",)
IGNORED_SUFFIXES = (".part", ".tmp", "~")
JOB_SUFFIXES = (".yaml", ".yml", ".json")

# --- job file -----------------------------------------------------------------------
MAX_JOB_BYTES = 1024 * 1024  # a job file larger than this is rejected unread
MAX_YAML_DEPTH = 32  # nesting deeper than this is rejected (stack bombs)
MAX_ID_LENGTH = 128
# One bulk action (`serve`'s POST /bulk) chooses at most this many jobs: its answer lists each.
BULK_MAX_JOBS = 10_000
BULK_MAX_BODY = BULK_MAX_JOBS * (MAX_ID_LENGTH + 4) + 4096  # the JSON of that many quoted ids
RETRY_RESET_THREADS = 16  # failed jobs sent back to retry/ side by side (their fsyncs commit together)
DEFAULT_MAX_ATTEMPTS = 3
MAX_MAX_ATTEMPTS = 100
DEFAULT_TIMEOUT_S = 3600.0
MAX_TIMEOUT_S = 7 * 24 * 3600.0
PRIORITY_MIN = -1000
PRIORITY_MAX = 1000
DEFAULT_PRIORITY = 0
DEFAULT_OUTPUT_SUFFIX = ".mp4"
# Spool-level caps on what one job may ask for (max_job_* settings): without them a few
# files with priority 1000, a 7-day timeout and 100 attempts hold every slot for weeks.
MAX_JOB_ATTEMPTS = 10
MAX_JOB_TIMEOUT_S = 6 * 3600.0
MAX_JOB_FRAMES = 30 * 3600  # one hour at 30 fps
# The per-frame pixel cap (width x height x scale^2) is derived from memory_per_job_mb
# unless set: Chromium's screenshot, the compositor's copy and ffmpeg's input buffers
# all scale with the frame. A 1280x720 composition at scale 16 (236 Mpx) used ~11 GB,
# about 47 bytes per pixel; 64 leaves room for the worker's fixed share, so the default
# 1024 MB allows 16.7 Mpx (4K UHD is 8.3 Mpx, 8K's 33 Mpx needs 2048 MB).
BYTES_PER_FRAME_PIXEL = 64

# --- timing -------------------------------------------------------------------------
# A file unchanged this long (no close/rename event) is complete. On a local spool the
# writer check decides (spoolrender.intake.completeness); this protects against other hosts' writers.
# Measured (bench/upload_intake.py --gaps, docs/uploads.md): scp/sftp send files under
# ~200 KiB in one burst at any -l; 900 KiB files stall 2.0 s (scp -l 1000), 5.1 s (scp
# -l 400), 20.4 s (scp/sftp -l 100); rsync --inplace --bwlimit=50 leaves a 2 KB file no
# gap, 60 KB 1.1 s, 250 KB 4.8 s, 900 KiB 5.1 s. Job files are small (samples < 1 KiB) and a
# longer default delays every job on a polled network filesystem: 5 s, documented per
# client in docs/uploads.md.
SETTLE_S = 5.0
# A name that inotify says is being written (modified, never closed) while the local
# writer check cannot tell (an unprivileged runner, another user's upload) waits for its
# close; this long quiet means the close event was lost.
UNCLOSED_WRITE_S = 600.0
# fanotify (spoolrender.intake.upload_closers, root only) follows each process that closed an upload in
# incoming/ with a pidfd, one descriptor each, until it exits or its close is older than
# the settle time plus this margin (then the file is settled anyway: following it longer
# changes no verdict). A burst of writers is capped, in total and per user (a hostile
# user's sleeping writers cannot take the runner's descriptors or another user's share):
# closes beyond the cap wait for the settle time. The total is also at most this share of
# the runner's descriptor limit (RLIMIT_NOFILE: 1/4 of Debian's 1024).
CLOSER_PIDFDS_MAX = 256
CLOSER_PIDFDS_PER_UID = 64
CLOSER_PIDFDS_FD_LIMIT_SHARE = 4
CLOSER_HOLD_MARGIN_S = 1.0
CLOSER_KEYS_MAX = 10_000  # inodes remembered at most; beyond, every close waits to settle
# Another host's start-up probe dir older than this (spool filesystem's clock) is a dead
# prober's leftover (spoolrender.spool.probe_dirs): a probe takes a second, a frozen host's too.
PROBE_LEFTOVER_AGE_S = 3600.0
# An entry in incoming/ whose claim fails (a mode-555 directory cannot be moved: EACCES)
# is tried again after this delay, doubling per failure up to the maximum.
BLOCKED_RETRY_MIN_S = 1.0
BLOCKED_RETRY_MAX_S = 300.0
BLOCKED_CLAIM_RETRY = RetryPolicy(BLOCKED_RETRY_MIN_S, BLOCKED_RETRY_MAX_S)
# A write to the spool that fails for the filesystem's own reason (full, over quota,
# read-only, I/O error, stale handle, cut off: spoolrender.spool.io_trouble) is tried again after this delay,
# doubling per failure up to the maximum; claiming pauses meanwhile, and the log says so
# once, then reminds at most once per delay. A freed disk is noticed within the maximum.
SPOOL_IO_RETRY_MIN_S = 1.0
SPOOL_IO_RETRY_MAX_S = 30.0
SPOOL_IO_RETRY = RetryPolicy(SPOOL_IO_RETRY_MIN_S, SPOOL_IO_RETRY_MAX_S)
# A background task (hook dispatch, the purge lease's renewal, serve's event stream and
# history) whose spool reads or writes keep failing logs it once, then a reminder at most
# this often, then once when it works again (spoolrender.spool.trouble_log): not a line per try.
TROUBLE_REMINDER_S = SPOOL_IO_RETRY_MAX_S
# A render that fails while its spool or output filesystem has less room than this (for
# an unprivileged writer) failed for the disk's sake: requeued without using an attempt.
FULL_DISK_BYTES = 1024 * 1024
# ...unless the run filled that disk itself: its own files (scratch output, log) take at
# least this share of the room the filesystem had when the run started (and at least this
# share of FULL_DISK_BYTES: less is any write on a disk already full). Its output may
# never fit, so that failure counts as an attempt, as any transient render failure does.
RUN_FILLED_DISK_SHARE = 0.5
# Free requeues are bounded: after this many spool I/O requeues of a job in a row, the
# next spool I/O stop counts as an attempt (and says so), so that no job can loop for ever
# without using one, whatever its disk does.
SPOOL_IO_FREE_REQUEUES = 5
HEARTBEAT_INTERVAL_S = 5.0
LEASE_S = 60.0  # a heartbeat unchanged this long (observer's monotonic clock) is dead
# A runner beacon from another host unchanged this long is removed from `status`
# (same-host runners are expired as soon as their process is provably gone).
RUNNER_EXPIRY_S = 24 * 3600.0
RUNNER_BEACON_MAX_BYTES = 1024**2  # a runner's beacon is a few hundred bytes; more is not one of ours
RESCAN_INTERVAL_S = 10.0  # full listing even when no event arrived
# How long a runner reuses its last probe of the spool filesystem's clock, moved on by
# the seconds passed (spoolrender.spool.clock.SpoolClock): one probe write a second, not a pass.
SPOOL_CLOCK_REUSE_SECONDS = 1.0
POLL_INTERVAL_S = 2.0  # watchdog PollingObserver period on network filesystems
# A job's failed attempt waits before its next one: doubling from the base, capped, with
# equal jitter (core/retry_policy.py); the spool's backoff_*_seconds settings replace both, and
# the job's max_attempts says how many it gets (SpoolConfig.job_retry).
BACKOFF_BASE_S = 30.0
BACKOFF_CAP_S = 3600.0
JOB_RETRY = RetryPolicy(BACKOFF_BASE_S, BACKOFF_CAP_S, jitter=True)
GRACE_S = 30.0  # SIGTERM: running jobs get this long before they are cancelled
KILL_GRACE_S = 5.0  # SIGTERM to a render's process group, then SIGKILL after this
# `status` with no runner online reads this many waiting files for their queue: and requires:
# (a runner's beacon has the counts otherwise); a deeper backlog's others count where dropped.
STATUS_QUEUE_READS = 1000
STATUS_WATCH_MIN_S = 0.1  # `status --watch`: shorter redraws faster than anyone reads, on a shared host
LIST_LIMIT = 50  # `spoolrender list`: jobs per page (a screenful); --limit for more
# Failure kinds a retry cannot cure as the job stands: `retry --all-failed` leaves them out
# unless --include-hopeless, or --kind names one. A cancelled job was stopped on purpose; a
# rerun-refused one finds the same file at its output until someone removes it.
RERUN_REFUSED = FailureKind.RERUN_REFUSED  # the failure kind of a rerun: true whose output is not its own
HOPELESS_KINDS = (
    FailureKind.INVALID_JOB, FailureKind.COMPOSITION_NOT_FOUND, FailureKind.INVALID_PROPS, FailureKind.CANCELLED,
    RERUN_REFUSED,
)  # fmt: skip
# Reading one job (show, GET /jobs/{id}, Job.status) while it moves between states: looks
# (a lookup, then reading the entry found) before it counts as gone or as moving too fast.
# A job moves once per state change, each after fsynced records: milliseconds at least.
JOB_READ_ATTEMPTS = 10
# A job lookup that found nothing is repeated (a job can move against the listing order)
# only if a directory a job can be in changed during it, or within this many seconds
# before it: directory timestamps come from a coarse clock (ticks of 1-10 ms locally; an
# NFS server's clock can lag ours by some milliseconds too).
DIR_STAMP_MARGIN_SECONDS = 1.0
# A read model that lists states and then reads the entries listed (a page of GET /jobs,
# a follower's first events, a split job's chunks) lists again when an entry moved on
# between its listing and its read (a run ended, a chunk finished), at most this many
# times: each time shows the entry where it went. A move takes milliseconds of fsynced
# writes: a few looks suffice. (`status`, and so the event stream, look for the one job
# where it went instead: state_listings.find_moved.)
MOVED_READ_ATTEMPTS = 3
# Progress published over time (serve, `status --watch`) is held at its highest per run
# (ops/progress_floor.py): the runs remembered at most, if no whole status document is read to
# forget the finished ones (a server nobody follows the events of, asked for job pages).
PROGRESS_FLOOR_ENTRIES = 10_000

# --- capacity -----------------------------------------------------------------------
THREADS_PER_JOB = 1  # Remotion concurrency per job; 2 brought no gain on 2 cores
# Auto slots per usable core (divided by threads_per_job). A Remotion render at
# concurrency 1 is a chain of round trips (seek, screenshot, pipe to ffmpeg) that leaves
# its core idle a third of the time: bench/concurrency.py measured 2 slots on 2 cores at
# 0.73 of the best, 4 slots (CPU 67% vs 93% busy; 5, 6 and 8 slots were slower), and 2
# slots best on 1 core (bench/README.md). Two jobs per core is the default.
SLOTS_PER_CORE = 2.0
MEMORY_PER_JOB_MB = 1024  # a Node worker + Chromium + ffmpeg for 720p

# --- renderers ----------------------------------------------------------------------
DEFAULT_RENDERER = "remotion"
BROWSER_EXECUTABLE = "/usr/bin/chromium"
# How long `submit` waits for a composition's schema to be called in the cached bundle's
# page (Node and Chromium start, the page loads): past it the job is queued with a warning.
PROPS_CHECK_TIMEOUT_S = 120.0
# Distinct run warnings (a project's mixed Remotion versions...) a runner keeps in its
# beacon for `status`, newest first.
RUNNER_WARNINGS_SHOWN = 5
REMOTION_PROJECT = "../remotion"  # relative to the spool directory unless absolute (repo layout)
OUTPUT_ROOT = "output"  # relative to the spool directory unless absolute

# --- chunked rendering (spoolrender.chunks) -----------------------------------------
# Remotion cannot join chunks of 4 frames or fewer seamlessly (AAC frames, h264 GOPs).
MIN_CHUNK_FRAMES = 5
MAX_CHUNKS = 64  # chunks one job may be split into (each is a spool entry and a file set)
CHUNK_FILENAME = "chunk.json"  # in a chunk entry: its parent and its frame range

# --- completion hooks (hooks: in spoolrender.yaml; see config/hooks.py) ----------------
HOOK_TIMEOUT_S = 10.0  # one delivery (a command's run, a webhook's request) at most
HOOK_TIMEOUT_MAX_S = 600.0
HOOK_ATTEMPTS = 10  # deliveries tried before giving up (logged, kept in the job's state)
HOOK_ATTEMPTS_MAX = 100
HOOK_BACKOFF_BASE_S = 10.0  # the wait after a failed delivery doubles from here...
HOOK_BACKOFF_CAP_S = 900.0  # ...up to here (with jitter): 10 attempts span about an hour
# A hook's attempts and backoff_seconds replace the base and the attempts (HookSpec.retry).
HOOK_RETRY = RetryPolicy(HOOK_BACKOFF_BASE_S, HOOK_BACKOFF_CAP_S, jitter=True, max_attempts=HOOK_ATTEMPTS)
HOOK_OUTPUT_BYTES = 2000  # of a hook command's output / a webhook's reply, kept in its log
# Deliveries of one hook in flight at once, each in a thread of its own: a slow receiver
# holds at most this many threads and never delays another hook.
HOOK_DELIVERIES_PER_HOOK = 2
HOOK_KILL_GRACE_S = 2.0  # a timed-out command's pipes, after its process group was killed

# --- host health (hosts/health.py) ----------------------------------------------------------
RETRY_ELSEWHERE_S = 120.0  # after a failure on host H, H's runners leave the retry this long
HOST_BLOCK_JOBS = 5  # different jobs failing on one host within the window block it...
HOST_BLOCK_WINDOW_S = 600.0
HOST_BLOCK_S = 1800.0  # ...for this quiet period, or until `spoolrender unblock HOST`
# At most this share of the online hosts, rounded down, is blocked at once (none of one
# host, one of two or three, two of four), and never the last online host of a queue:
# a rule meant to route around a bad host must never stop the farm (hosts/blocks.py).
HOST_BLOCK_MAX_SHARE = 0.5
# A host's records (hosts/): its failures file holds one window's failures (~60 bytes each)
# and its block marker a few of them; more is not one of ours.
HOST_RECORD_MAX_BYTES = 16 * 1024**2
# A blocked host claims one job as a probe this long after its block began and after each
# probe that failed; a probe done lifts the block.
HOST_PROBE_S = 60.0
# `status` names a host whose wall clock is this far from the spool filesystem's (a beacon's
# own time against its mtime; write latency and whole-second mtimes on sshfs stay below it).
CLOCK_SKEW_SHOWN_S = 10.0


# --- render cache (render_cache/entries.py; docs/render-cache.md) ---------------------------
# Off unless the spool sets render_cache: true or a job cache: true (a composition that
# fetches data or reads the clock is not a pure function of its inputs).
RENDER_CACHE = False
RENDER_CACHE_DIR = ".spoolrender-cache"  # under the output root: hard links need one filesystem
RENDER_CACHE_MAX_BYTES = 10 * 1024**3  # least recently used entries go past this
# A waiter looks this often whether the identical job it waits for has finished.
RENDER_CACHE_POLL_S = 0.5
# Staging left by a runner killed while storing an entry is removed after this long.
RENDER_CACHE_STAGING_S = 3600.0
RENDER_CACHE_META_MAX_BYTES = 1024**2  # an entry.json is a few hundred bytes; more is not one of ours


# Warm Remotion workers (one per project) a job slot keeps; the least recently used goes
# when a job for another project needs one more. Each holds a Chromium (~150-300 MB).
WARM_PROJECTS_PER_SLOT = 2

# Retention (ops/retention.py): how often the spool's finished jobs are purged by keep_done,
# keep_failed and their caps; any runner may do it, one at a time (a lease).
RETENTION_INTERVAL_S = 600.0
RETENTION_DIR = "retention"  # in .spoolrender/: the purge lease and the last purge's report
RETENTION_CHECK_S = 60.0  # how often a runner looks whether a purge is due (a probe file, one read)

# Descriptors one tree removal keeps open at most (spoolrender.spool.tree_removal): a tree of any
# depth is removed without recursion and without running a runner out of descriptors.
TREE_REMOVAL_MAX_FDS = 32
