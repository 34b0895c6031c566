"""contrib/: the operator kit, checked with the real tools.

systemd units with `systemd-analyze verify` and `security` (against a throw-away root that
holds the unit unchanged and a stub at its ExecStart path), alert rules with `promtool`,
the drop script against real spools (watched with inotify) and with shellcheck, logrotate
with a real rotation, the cron file's syntax, and every spoolrender command line in them
with spoolrender's own argument parser. A test whose tool is missing is skipped, saying
so; `bash scripts/test.sh` installs them all (`scripts/setup.sh --test`).
"""

from __future__ import annotations

import contextlib
import grp
import io
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from support.processes import spoolrender_cmd
from support.spool_jobs import command_job, entries
from support.waiting import wait_for
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from spoolrender import defaults
from spoolrender.cli import build_parser
from spoolrender.spool import glusterfs
from spoolrender.spool.layout import SpoolLayout

CONTRIB = Path(__file__).resolve().parents[2] / "contrib"
UNITS = CONTRIB / "systemd"
SERVICE = UNITS / "spoolrender.service"
TEMPLATE = UNITS / "spoolrender@.service"
SPOOL_MOUNT = "srv-spoolrender-spool.mount"  # systemd-escape --path --suffix=mount of the units' spool
MOUNTS = {fs: UNITS / fs / SPOOL_MOUNT for fs in ("glusterfs", "nfs")}
CRON = CONTRIB / "cron" / "spoolrender.cron"
DROP = CONTRIB / "drop" / "spoolrender-drop"
LOGROTATE = CONTRIB / "logrotate" / "spoolrender"
ALERTS = CONTRIB / "prometheus" / "spoolrender-alerts.yml"
ALERT_TESTS = CONTRIB / "prometheus" / "spoolrender-alerts.test.yml"

INSTALLED = "/opt/spoolrender/.venv/bin/spoolrender"  # where the units and cron expect it
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
# Flags the contrib files use that spoolrender is gaining right now: a command line that
# fails only on these is skipped (saying which), any other rejection fails.
UPCOMING_FLAGS = {"--metrics-textfile", "--runner-name", "--log-format", "--prometheus"}
# The metric names spoolrender exports (the contract the alert rules are written against).
METRICS = {
    "spoolrender_jobs",
    "spoolrender_spool_io_failing",
    "spoolrender_spool_io_errors_total",
    "spoolrender_backlog_age_seconds",
    "spoolrender_runners_online",
    "spoolrender_slots",
    "spoolrender_slots_busy",
    "spoolrender_jobs_claimed_total",
    "spoolrender_jobs_finished_total",
    "spoolrender_render_duration_seconds",
    "spoolrender_job_attempts",
    "spoolrender_queue_jobs_waiting",
    "spoolrender_queue_jobs_unserved",
    "spoolrender_queue_oldest_age_seconds",
    "spoolrender_render_cache_hits_total",
    "spoolrender_render_cache_misses_total",
    "spoolrender_render_cache_stores_total",
    "spoolrender_render_cache_evictions_total",
    "spoolrender_render_cache_bytes",
    "spoolrender_retention_purged_total",
    "spoolrender_retention_last_purge_timestamp_seconds",
}


def tool(name: str) -> str:
    """The path of a command-line tool, or skip the test saying how to get it."""
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin", "/usr/bin"])
    path = shutil.which(name, path=search)
    if path is None:
        pytest.skip(f"{name} not found (bash scripts/test.sh installs it via scripts/setup.sh --test)")
    return path


def run(
    args: list[str],
    *,
    input: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    umask: int = -1,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, input=input, env=env, cwd=cwd, umask=umask, capture_output=True, text=True, check=False,
        timeout=120,
    )  # fmt: skip


# --- command lines ------------------------------------------------------------------------


def unit_entries(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of a unit file, in order; continuation lines joined."""
    out: list[tuple[str, str, str]] = []
    section = ""
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def unit_values(path: Path, key: str, section: str = "Service") -> list[str]:
    return [v for s, k, v in unit_entries(path.read_text()) if s == section and k == key]


def unit_value(path: Path, key: str, section: str = "Service") -> str:
    values = unit_values(path, key, section)
    assert len(values) == 1, f"{path.name}: {key}= set {len(values)} times"
    return values[0]


def exec_start(unit: Path) -> list[str]:
    return shlex.split(unit_value(unit, "ExecStart"))


def cron_jobs(text: str) -> tuple[list[str], list[str]]:
    """The commands of the active cron lines and of the commented-out (alternative) ones."""
    active: list[str] = []
    commented: list[str] = []
    for line in text.splitlines():
        target = commented if line.startswith("# ") else active
        body = line[2:] if line.startswith("# ") else line
        fields = body.split(None, 6)
        if len(fields) == 7 and all(re.fullmatch(r"[0-9*/,-]+", f) for f in fields[:5]):
            assert fields[5] == "spoolrender", f"cron line runs as {fields[5]!r}: {line}"
            target.append(fields[6])
    return active, commented


def spoolrender_argv(command: str) -> list[str]:
    """The arguments of the spoolrender invocation inside a shell command line."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    tokens = list(lex)
    start = next(i for i, t in enumerate(tokens) if t.endswith("/spoolrender"))
    argv = []
    for token in tokens[start + 1 :]:
        if set(token) <= set("();<>|&"):
            break
        argv.append(token)
    return argv


def check_cli_accepts(argv: list[str]) -> None:
    """spoolrender's own parser must accept ``argv``; skip if it lacks only upcoming flags."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser().parse_args(argv)
    except SystemExit:
        message = err.getvalue()
        m = re.search(r"unrecognized arguments: (.*)", message)
        unknown = {t for t in m.group(1).split() if t.startswith("--")} if m else set()
        if unknown and unknown <= UPCOMING_FLAGS:
            pytest.skip(f"this spoolrender does not have {', '.join(sorted(unknown))} yet")
        pytest.fail(f"spoolrender rejects {shlex.join(argv)}:\n{message}")


def cli_supports(*argv: str) -> bool:
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            build_parser().parse_args(list(argv))
    except SystemExit:
        return False
    return True


def command_lines() -> list[tuple[str, list[str]]]:
    active, commented = cron_jobs(CRON.read_text())
    return [
        ("spoolrender.service", exec_start(SERVICE)[1:]),
        ("spoolrender@.service", exec_start(TEMPLATE)[1:]),
        *[(f"cron: {c[:60]}", spoolrender_argv(c)) for c in active + commented],
    ]


@pytest.mark.parametrize(("where", "argv"), command_lines(), ids=lambda v: v if isinstance(v, str) else "")
def test_contrib_command_lines_are_accepted_by_spoolrender(where: str, argv: list[str]) -> None:
    check_cli_accepts(argv)


# --- systemd ------------------------------------------------------------------------------


@pytest.fixture
def unit_root(tmp_path: Path) -> Path:
    """A root directory for `systemd-analyze --root`: the system's own units (targets etc.)
    and a stub executable at the units' ExecStart path, so verify checks the unit as shipped."""
    tool("systemd-analyze")
    source = next((p for p in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if p.is_dir()), None)
    if source is None:
        pytest.skip("no systemd unit directory on this machine")
    root = tmp_path / "root"
    shutil.copytree(source, root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    stub = root / INSTALLED.lstrip("/")
    stub.parent.mkdir(parents=True)
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    return root


def analyze(root: Path, unit_file: Path, *args: str, text: str | None = None) -> subprocess.CompletedProcess[str]:
    dest = root / "etc/systemd/system" / unit_file.name
    dest.write_text(unit_file.read_text() if text is None else text)
    return run([tool("systemd-analyze"), *args, f"--root={root}"])


@pytest.mark.parametrize(
    ("unit", "name"), [(SERVICE, "spoolrender.service"), (TEMPLATE, "spoolrender@render1.service")]
)
def test_units_pass_systemd_analyze_verify(unit_root: Path, unit: Path, name: str) -> None:
    result = analyze(unit_root, unit, "verify", name)
    # verify reports unknown keys and unparsable values only as warnings (exit 0):
    # any output at all is a mistake in the unit.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stderr


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("KillMode=mixed", "KillMode=mixd"),  # a bad value: a warning, exit 0
        ("Restart=on-failure", "Restart=on-failure\nRestartSecs=5s"),  # a typo'd key: a warning
        (f"ExecStart={INSTALLED}", f"ExecStart={INSTALLED}-missing"),  # no such binary: exit 1
    ],
    ids=["bad-value", "unknown-key", "missing-binary"],
)
def test_verify_check_catches_a_broken_unit(unit_root: Path, old: str, new: str) -> None:
    text = SERVICE.read_text()
    assert old in text
    broken = unit_root / "broken.service"
    result = analyze(unit_root, broken, "verify", "broken.service", text=text.replace(old, new, 1))
    assert result.returncode != 0 or (result.stdout + result.stderr).strip()
    assert "broken.service" in result.stderr


@pytest.mark.parametrize("fs", sorted(MOUNTS))
def test_mount_units_pass_systemd_analyze_verify(unit_root: Path, fs: str) -> None:
    result = analyze(unit_root, MOUNTS[fs], "verify", SPOOL_MOUNT)
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stderr
    # The unit's name must be its mount point: a copy under another name is refused.
    other = unit_root / "srv-spool.mount"
    result = analyze(unit_root, other, "verify", other.name, text=MOUNTS[fs].read_text())
    assert result.returncode != 0 and "doesn't match unit name" in result.stderr


def mount_options(fs: str) -> list[str]:
    return unit_value(MOUNTS[fs], "Options", "Mount").split(",")


def test_mount_units_mount_the_spool_with_the_supported_options() -> None:
    spool = unit_value(SERVICE, "RequiresMountsFor", "Unit")
    for fs, unit in MOUNTS.items():
        assert unit_value(unit, "Where", "Mount") == spool, fs  # the runners' units pull it in
        assert unit_value(unit, "Type", "Mount") == fs
        assert unit_values(unit, "WantedBy", "Install") == ["remote-fs.target"]
    # GlusterFS: no FUSE attribute, name or page cache (docs/contrib.md, "Mount units"):
    # measured on a replica-3 volume, the defaults left a renamed name visible on other
    # hosts for ~1 s and a same-size rewrite stale; backup-volfile-servers only lets the
    # mount start while the first server is down.
    # The supported list is spoolrender.spool.glusterfs's (what fscheck checks, and what the GlusterFS
    # lab mounts with): the unit must say exactly that.
    gluster = mount_options("glusterfs")
    assert sorted(o for o in gluster if not o.startswith("backup-volfile-servers=")) == sorted(glusterfs.MOUNT_OPTIONS)
    for option, value in glusterfs.VOLUME_OPTIONS:
        assert f"gluster volume set spool {option} {value}" in MOUNTS["glusterfs"].read_text()
    # NFS: v4.2, hard, attributes cached far below the lease, no negative lookup cache.
    nfs = mount_options("nfs")
    assert nfs == ["vers=4.2", "hard", "actimeo=1", "lookupcache=positive"]
    assert float(nfs[2].partition("=")[2]) * 10 <= defaults.LEASE_S


@pytest.mark.parametrize(("unit", "name"), [(SERVICE, "spoolrender.service"), (TEMPLATE, "spoolrender@r1.service")])
def test_units_stay_hardened(unit_root: Path, unit: Path, name: str) -> None:
    # systemd's exposure score, 0 (locked down) to 10; ours is 3.8. 5.0 fails on a lost
    # protection or two, as the unhardened baseline below proves.
    result = analyze(unit_root, unit, "security", "--offline=yes", "--threshold=50", name)
    if "--offline" in result.stderr and "unrecognized" in result.stderr:
        pytest.skip("this systemd-analyze has no --offline security check (systemd < 250)")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    plain = unit_root / "plain.service"
    baseline = analyze(unit_root, plain, "security", "--offline=yes", "--threshold=50", "plain.service",
                       text=f"[Service]\nExecStart={INSTALLED} run\n")  # fmt: skip
    assert baseline.returncode != 0


def test_unit_settings_match_the_runner() -> None:
    for unit in (SERVICE, TEMPLATE):
        argv = exec_start(unit)
        assert argv[0] == INSTALLED and argv[1] == "run"
        spool = argv[argv.index("--spool") + 1]
        assert spool in unit_values(unit, "ReadWritePaths")
        assert unit_value(unit, "RequiresMountsFor", "Unit") == spool
        assert argv[argv.index("--metrics-textfile") + 1].startswith(TEXTFILE_DIR + "/")
        assert f"-{TEXTFILE_DIR}" in unit_values(unit, "ReadWritePaths")
        # Stopping: SIGTERM to the runner only, SIGKILL to the rest after its grace.
        assert unit_value(unit, "KillMode") == "mixed"
        assert unit_value(unit, "KillSignal") == "SIGTERM"
        assert int(unit_value(unit, "TimeoutStopSec")) >= defaults.GRACE_S + defaults.KILL_GRACE_S + 5
        assert unit_value(unit, "Restart") == "on-failure"
        assert unit_value(unit, "OOMPolicy") == "continue"
        assert unit_value(unit, "User") == "spoolrender" and unit_value(unit, "Group") == "render"
        assert unit_value(unit, "CacheDirectory") == "spoolrender"
        assert "SPOOLRENDER_CACHE_DIR=/var/cache/spoolrender" in unit_values(unit, "Environment")
        for key, value in [
            ("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("ProtectHome", "yes"),
            ("PrivateTmp", "yes"), ("ProtectKernelTunables", "yes"), ("ProtectKernelModules", "yes"),
            ("ProtectControlGroups", "yes"), ("RestrictSUIDSGID", "yes"), ("LockPersonality", "yes"),
        ]:  # fmt: skip
            assert unit_value(unit, key) == value, key
        # V8's JIT needs W+X memory; Chromium's sandboxes need their syscalls and namespaces.
        for key in ("MemoryDenyWriteExecute", "SystemCallFilter", "RestrictNamespaces"):
            assert not unit_values(unit, key), key
    template = exec_start(TEMPLATE)
    assert template[template.index("--runner-name") + 1] == "%H-%i"
    assert "%i" in template[template.index("--metrics-textfile") + 1]
    assert unit_values(TEMPLATE, "EnvironmentFile") == ["-/etc/spoolrender/%i.env"]


# --- Prometheus ---------------------------------------------------------------------------


def test_alert_rules_pass_promtool_check() -> None:
    result = run([tool("promtool"), "check", "rules", str(ALERTS)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


def test_alert_rules_pass_their_unit_tests() -> None:
    # The tests prove on synthetic series that each alert fires (NoRunner on 0 and on
    # absent metrics, SuccessRateLow at 90% and with failures only) and stays quiet when
    # it should (a runner online, a counter reset, too few jobs, a shrinking backlog).
    result = run([tool("promtool"), "test", "rules", ALERT_TESTS.name], cwd=ALERT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("or\n          absent(spoolrender_runners_online)", ""),  # NoRunner misses "no metrics"
        ("0 * sum without", "sum without"),  # SuccessRateLow misses "failures only"
        ("> 3600", "> 7200"),  # OldestJobTooOld fires too late
        ("0.5 * sum", "2 * sum"),  # RenderCacheThrashing never fires
        (">= 20", ">= 0"),  # RenderCacheThrashing fires on a cache that stores little
        ("(spoolrender_spool_io_failing) > 0", "(spoolrender_spool_io_failing) > 1"),  # SpoolIOFailing never fires
    ],
    ids=["no-absent", "no-zero-done", "threshold", "cache-ratio", "cache-min-stores", "spool-io"],
)
def test_alert_unit_tests_catch_a_broken_rule(tmp_path: Path, old: str, new: str) -> None:
    promtool = tool("promtool")
    rules = ALERTS.read_text()
    assert old in rules
    (tmp_path / ALERTS.name).write_text(rules.replace(old, new, 1))
    shutil.copy(ALERT_TESTS, tmp_path / ALERT_TESTS.name)
    assert run([promtool, "check", "rules", ALERTS.name], cwd=tmp_path).returncode == 0
    result = run([promtool, "test", "rules", ALERT_TESTS.name], cwd=tmp_path)
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


def test_alert_rules_use_only_spoolrender_metrics_and_are_annotated() -> None:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    rules = [r for g in groups for r in g["rules"]]
    names = {r["alert"] for r in rules}
    assert {"SpoolrenderBacklogGrowing", "SpoolrenderSuccessRateLow", "SpoolrenderNoRunner"} <= names
    assert "SpoolrenderOldestJobTooOld" in names
    used = {m for r in rules for m in re.findall(r"\bspoolrender_[a-z_]+\b", r["expr"])}
    assert used and used <= METRICS, used - METRICS
    for rule in rules:
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical")


def metric_names(exposition: str) -> set[str]:
    return set(re.findall(r"^# TYPE (\S+)", exposition, re.M)) | set(
        re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", exposition, re.M)
    )


def cron_command(command: str, tmp_path: Path) -> str:
    """A cron command with its system paths moved into ``tmp_path`` and this spoolrender."""
    here = f"{shlex.quote(sys.executable)} -m spoolrender.cli"
    for old, new in [
        (INSTALLED, here),
        (TEXTFILE_DIR, str(tmp_path / "textfile")),
        ("/var/log/spoolrender", str(tmp_path / "log")),
        ("/run/lock", str(tmp_path)),
    ]:
        command = command.replace(old, new)
    for d in ("textfile", "log"):
        (tmp_path / d).mkdir(exist_ok=True)
    return command


def cron_env(spool: SpoolLayout, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOOLRENDER_")}
    return {**env, "SPOOLRENDER_SPOOL": str(spool.root), "SPOOLRENDER_CACHE_DIR": str(tmp_path / "cache")}


def test_cron_drain_line_runs_and_writes_valid_metrics(spool: SpoolLayout, tmp_path: Path) -> None:
    if not cli_supports("run", "--drain", "--metrics-textfile", "x", "--runner-name", "x"):
        pytest.skip("this spoolrender has no run --metrics-textfile/--runner-name yet")
    promtool = tool("promtool")
    tool("flock")
    (drain,), _ = cron_jobs(CRON.read_text())
    result = run(["sh", "-c", cron_command(drain, tmp_path)], env=cron_env(spool, tmp_path), cwd=tmp_path)
    log = (tmp_path / "log" / "drain.log").read_text()
    assert result.returncode == 0, log
    assert "drained:" in log
    prom = tmp_path / "textfile" / "spoolrender-drain.prom"
    checked = run([promtool, "check", "metrics"], input=prom.read_text())
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert metric_names(prom.read_text()) & METRICS
    assert sorted(p.name for p in prom.parent.iterdir()) == [prom.name]  # no temporary left


def test_cron_status_alternative_writes_the_textfile_atomically(spool: SpoolLayout, tmp_path: Path) -> None:
    if not cli_supports("status", "--prometheus"):
        pytest.skip("this spoolrender has no status --prometheus yet")
    promtool = tool("promtool")
    _, (status_line,) = cron_jobs(CRON.read_text())
    result = run(["sh", "-c", cron_command(status_line, tmp_path)], env=cron_env(spool, tmp_path))
    assert result.returncode == 0, result.stderr
    prom = tmp_path / "textfile" / "spoolrender-status.prom"
    assert sorted(p.name for p in prom.parent.iterdir()) == [prom.name]
    checked = run([promtool, "check", "metrics"], input=prom.read_text())
    assert checked.returncode == 0, checked.stdout + checked.stderr
    names = metric_names(prom.read_text())
    assert {"spoolrender_jobs", "spoolrender_backlog_age_seconds", "spoolrender_runners_online"} <= names


def test_cron_file_is_valid_for_cron(tmp_path: Path) -> None:
    text = CRON.read_text()
    assert text.endswith("\n")  # cron ignores a last line without a newline
    active, commented = cron_jobs(text)
    assert len(active) == 1 and len(commented) == 1
    (drain,) = active
    assert "run --drain -q" in drain and drain.startswith("flock -n ")
    for command in active + commented:
        # cron turns an unescaped % into a newline
        assert not re.search(r"(?<!\\)%", command), command
        syntax = run(["sh", "-n", "-c", command])
        assert syntax.returncode == 0, syntax.stderr
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert re.match(r"[A-Z_]+=", line) or cron_jobs(line)[0], f"neither a variable nor a job: {line}"


# --- the drop script ----------------------------------------------------------------------


def drop_cmd(*args: str, shell: str | None = None) -> list[str]:
    return [shell, str(DROP), *args] if shell else [str(DROP), *args]


class Recorder(FileSystemEventHandler):
    """Every (event type, name) in one directory, as inotify reports them."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.directory = os.fsdecode(directory)
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def on_any_event(self, event: FileSystemEvent) -> None:
        for path in (event.src_path, event.dest_path):
            p = os.fsdecode(path)
            if p and os.path.dirname(p) == self.directory:
                with self.lock:
                    self.events.append((event.event_type, os.path.basename(p)))

    def seen(self) -> list[tuple[str, str]]:
        with self.lock:
            return list(self.events)


def big_job(tag: str) -> bytes:
    """A valid command job of ~600 KiB (under max_job_bytes), so a copy takes many writes."""
    body = yaml.safe_dump(command_job(tag=tag)).encode()
    filler = b"".join(b"# %06d padding padding padding padding padding padding\n" % i for i in range(11000))
    return body + filler


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_drop_local_never_shows_a_partial_job(spool: SpoolLayout, tmp_path: Path, shell: str) -> None:
    shell_path = tool(shell)
    job = tmp_path / "recap.yaml"
    data = big_job("local")
    job.write_bytes(data)
    recorder = Recorder(spool.incoming)

    def delivered() -> bool:
        """inotify has delivered the finished script's events up to its last two: the
        temporary's removal, then the empty close that tells runners the job is complete."""
        seen = recorder.seen()
        return any(t == "deleted" and n.endswith(".part") for t, n in seen) and ("closed", "recap.yaml") in seen

    observer = Observer()
    observer.schedule(recorder, str(spool.incoming), recursive=False)
    observer.start()
    try:
        result = run(drop_cmd(str(job), str(spool.root), shell=shell_path), umask=0o077)
        wait_for(delivered, timeout=60)
    finally:
        observer.stop()
        observer.join()
    assert result.returncode == 0, result.stderr
    final = spool.incoming / "recap.yaml"
    assert result.stdout == f"{final}\n"
    assert entries(spool, "incoming") == ["recap.yaml"]
    assert final.read_bytes() == data
    st = final.stat()
    assert st.st_mode & 0o040, "the runner reads jobs through the group (even with umask 077)"
    assert st.st_gid == spool.incoming.stat().st_gid  # setgid incoming/: the spool's group
    events = recorder.seen()
    names = {n for _, n in events}
    hidden = {n for n in names if n.startswith(".") and n.endswith(".part")}
    assert names == {"recap.yaml"} | hidden and len(hidden) == 1, events
    # The job name never saw a write: it appeared whole (link), and its only close after
    # opening for writing is the script's empty one that tells runners it is complete.
    # All the writing happened under the hidden name.
    final_events = [t for t, n in events if n == "recap.yaml"]
    assert final_events[0] == "created" and "modified" not in final_events, events
    assert "closed" in final_events, events
    (part,) = hidden
    assert ("modified", part) in events


def test_drop_refuses_to_overwrite_an_existing_job(spool: SpoolLayout, tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "intro.yaml", tmp_path / "b" / "intro.yaml"
    for path, tag in ((first, "first"), (second, "second")):
        path.parent.mkdir()
        path.write_text(yaml.safe_dump(command_job(tag=tag)))
    assert run(drop_cmd(str(first), str(spool.root))).returncode == 0
    result = run(drop_cmd(str(second), str(spool.root)))
    assert result.returncode == 3
    assert "already exists; not overwritten" in result.stderr and result.stdout == ""
    assert entries(spool, "incoming") == ["intro.yaml"]
    assert (spool.incoming / "intro.yaml").read_text() == first.read_text()
    # Several jobs: all are tried; one name taken makes the status 3.
    other = tmp_path / "other.yml"
    other.write_text(yaml.safe_dump(command_job(tag="other")))
    result = run(drop_cmd(str(second), str(other), str(spool.root)))
    assert result.returncode == 3
    assert entries(spool, "incoming") == ["intro.yaml", "other.yml"]


def test_drop_reads_stdin(spool: SpoolLayout) -> None:
    job = yaml.safe_dump(command_job(tag="stdin"))
    result = run(drop_cmd("-n", "recap-42", "-", str(spool.root)), input=job)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{spool.incoming / 'recap-42.yaml'}\n"
    assert (spool.incoming / "recap-42.yaml").read_text() == job
    result = run(drop_cmd("-", str(spool.root)), input=job)
    assert result.returncode == 0, result.stderr
    (name,) = set(entries(spool, "incoming")) - {"recap-42.yaml"}
    assert re.fullmatch(r"stdin-\d{8}T\d{6}-\d+\.yaml", name)
    empty = run(drop_cmd("-n", "empty", "-", str(spool.root)), input="")
    assert empty.returncode == 1 and "empty" in empty.stderr


def test_a_watching_runner_claims_a_dropped_job_at_once(
    spool: SpoolLayout, tmp_path: Path, start_runner: Callable[..., subprocess.Popen[bytes]]
) -> None:
    # With settle_seconds=3600 a job seen only by its name would wait an hour; the script's
    # close-after-write tells the runner (inotify) that the job is complete.
    start_runner("--set", "settle_seconds=3600", "--watch", "inotify")
    wait_for(lambda: bool(os.listdir(spool.runners)), timeout=60)  # its watch is set up by then
    job = tmp_path / "quick.yaml"
    job.write_text(yaml.safe_dump(command_job(tag="quick")))
    assert run(drop_cmd(str(job), str(spool.root))).returncode == 0
    # Within minutes however loaded the machine, never the hour a job seen by name would wait.
    wait_for(lambda: any(n.startswith("quick.") for n in entries(spool, "done")), timeout=300)


def test_dropped_job_is_rendered_by_a_runner(spool: SpoolLayout, tmp_path: Path) -> None:
    job = tmp_path / "clip"  # no suffix: .yaml is added, as `spoolrender submit` does
    job.write_text(yaml.safe_dump({**command_job(tag="e2e"), "output": "clips/e2e.json"}))
    result = run(drop_cmd(str(job), str(spool.root)))
    assert result.returncode == 0, result.stderr
    assert entries(spool, "incoming") == ["clip.yaml"]
    drain = run(spoolrender_cmd("run", "--drain", "--spool", str(spool.root)))
    assert drain.returncode == 0, drain.stderr
    assert [n.split(".")[0] for n in entries(spool, "done")] == ["clip"], drain.stderr
    assert (spool.root / "output" / "clips" / "e2e.json").is_file()


def fake_ssh(tmp_path: Path, receive: str = 'sh -c "$*"') -> Path:
    """An ssh stand-in: skips ssh options, logs the host, and runs the command words joined
    by spaces with a shell in $HOME, as sshd hands them to the remote user's login shell."""
    stub = tmp_path / "fake-ssh"
    stub.write_text(
        "#!/bin/sh\n"
        "while [ $# -gt 0 ]; do\n"
        "  case $1 in\n"
        "    --) shift; break ;;\n"
        "    -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;\n"
        "    -*) shift ;;\n"
        "    *) break ;;\n"
        "  esac\n"
        "done\n"
        f'printf "%s\\n" "$1" >> {shlex.quote(str(tmp_path / "ssh-hosts"))}\n'
        "shift\n"
        f'cd "$HOME" && {receive}\n'
    )
    stub.chmod(0o755)
    return stub


def test_drop_to_a_remote_spool_over_ssh(spool: SpoolLayout, tmp_path: Path) -> None:
    env = {**os.environ, "SPOOLRENDER_DROP_SSH": f"{fake_ssh(tmp_path)} -o BatchMode=yes -p 22", "HOME": str(tmp_path)}
    name = 'it\'s a "job" $(touch pwned) `touch pwned2`.yaml'
    job = tmp_path / name
    data = big_job("remote")
    job.write_bytes(data)
    result = run(drop_cmd(str(job), f"render@box:{spool.root}/"), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"render@box:{spool.root}/incoming/{name}\n"
    assert (spool.incoming / name).read_bytes() == data
    assert not list(tmp_path.glob("pwned*")), "a job name was run as a command"
    # host:~/path and host:relative are relative to the remote home; the name is taken now.
    relative = os.path.relpath(spool.root, tmp_path)
    result = run(drop_cmd(str(job), f"box:~/{relative}"), env=env, cwd="/")
    assert result.returncode == 3 and "already exists" in result.stderr
    assert (tmp_path / "ssh-hosts").read_text().splitlines() == ["render@box", "box"]
    assert entries(spool, "incoming") == [name]


def test_drop_refuses_a_damaged_upload(spool: SpoolLayout, tmp_path: Path) -> None:
    # A connection that loses the end of the job: the receiver sees EOF early.
    stub = fake_ssh(tmp_path, receive='head -c 1000 | sh -c "$*"')
    env = {**os.environ, "SPOOLRENDER_DROP_SSH": str(stub), "HOME": str(tmp_path)}
    job = tmp_path / "cut.yaml"
    job.write_bytes(big_job("cut"))
    result = run(drop_cmd(str(job), f"box:{spool.root}"), env=env)
    assert result.returncode == 1 and "damaged or incomplete" in result.stderr
    assert entries(spool, "incoming") == []  # neither the job nor its temporary
    failing = tmp_path / "no-ssh"
    failing.write_text("#!/bin/sh\necho 'ssh: connect to host box port 22: Connection refused' >&2\nexit 255\n")
    failing.chmod(0o755)
    result = run(drop_cmd(str(job), f"box:{spool.root}"), env={**env, "SPOOLRENDER_DROP_SSH": str(failing)})
    assert result.returncode == 1 and "Connection refused" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([], 2, "need at least one JOB and a DEST"),
        (["job.yaml"], 2, "need at least one JOB and a DEST"),
        (["-x", "job.yaml", "SPOOL"], 2, "unknown option -x"),
        (["-n", "a", "job.yaml", "job.yaml", "SPOOL"], 2, "-n NAME needs exactly one JOB"),
        (["-", "-", "SPOOL"], 2, "standard input (-) can be given only once"),
        (["-n", ".hidden", "job.yaml", "SPOOL"], 2, "invalid job name"),
        (["-n", "x.part", "job.yaml", "SPOOL"], 2, "invalid job name"),
        (["upload.part", "SPOOL"], 1, "invalid job name"),
        (["missing.yaml", "SPOOL"], 1, "missing.yaml"),
        (["job.yaml", "NOSPOOL"], 1, "no such directory"),
    ],
)
def test_drop_errors(spool: SpoolLayout, tmp_path: Path, args: list[str], code: int, message: str) -> None:
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(command_job()))
    (tmp_path / "upload.part").write_text(yaml.safe_dump(command_job()))
    args = [str(spool.root) if a == "SPOOL" else str(tmp_path / "nospool") if a == "NOSPOOL" else a for a in args]
    result = run(drop_cmd(*args), cwd=tmp_path, input="")
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert entries(spool, "incoming") == []


def test_drop_help_teaches() -> None:
    result = run(drop_cmd("--help"))
    assert result.returncode == 0 and result.stderr == ""
    text = result.stdout
    assert text.startswith("Usage: spoolrender-drop [-n NAME] JOB.yaml... DEST")
    for needle in ("Examples:", "Exit status:", "host:path", "SPOOLRENDER_DROP_SSH", " - render1:"):
        assert needle in text, needle
    for code in "0123":
        assert re.search(rf"^  {code}  ", text, re.M), f"exit status {code} undocumented"
    assert run(drop_cmd("-h")).stdout == text


def test_drop_script_passes_shellcheck() -> None:
    result = run([tool("shellcheck"), "--shell=sh", "--severity=style", str(DROP)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert os.access(DROP, os.X_OK)
    assert DROP.read_text().startswith("#!/bin/sh\n")


# --- logrotate ----------------------------------------------------------------------------


def logrotate_config(tmp_path: Path) -> Path:
    """The shipped config, rotating tmp_path/log as the current user instead."""
    user = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid()).gr_name
    text = LOGROTATE.read_text()
    assert "/var/log/spoolrender/*.log {" in text and "su spoolrender render" in text
    text = text.replace("/var/log/spoolrender", str(tmp_path / "log")).replace(
        "su spoolrender render", f"su {user} {group}"
    )
    (tmp_path / "log").mkdir()
    conf = tmp_path / "logrotate.conf"
    conf.write_text(text)
    conf.chmod(0o644)
    return conf


def test_logrotate_config_parses(tmp_path: Path) -> None:
    conf = logrotate_config(tmp_path)
    (tmp_path / "log" / "drain.log").write_text("x\n")
    result = run([tool("logrotate"), "--debug", "--state", str(tmp_path / "state"), str(conf)])
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr.lower(), result.stderr


def test_logrotate_is_safe_while_a_drain_writes(tmp_path: Path) -> None:
    logrotate = tool("logrotate")
    conf = logrotate_config(tmp_path)
    log = tmp_path / "log" / "drain.log"
    # The cron line's `>>`: one O_APPEND descriptor kept open across the rotation.
    with open(log, "ab", buffering=0) as out:
        for i in range(1000):
            out.write(b"before %d\n" % i)
        result = run([logrotate, "--force", "--state", str(tmp_path / "state"), str(conf)])
        assert result.returncode == 0, result.stderr
        for i in range(10):
            out.write(b"after %d\n" % i)
    rotated = tmp_path / "log" / "drain.log.1.gz"
    assert rotated.is_file()
    unzipped = run(["gzip", "-dc", str(rotated)])
    assert unzipped.stdout.splitlines() == [f"before {i}" for i in range(1000)]
    # Appending carries on at the start of the truncated file: no hole of NULs.
    assert log.read_bytes() == b"".join(b"after %d\n" % i for i in range(10))
