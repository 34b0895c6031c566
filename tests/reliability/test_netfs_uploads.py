"""A slow upload from another host, polled through an sshfs mount that caches attributes.

Issue 21, item 1. A runner polling a spool through sshfs with kernel attribute caching
(``attr_timeout=5``) saw an upload that another host was still writing as unchanged, and
old enough to be settled, for up to 5 s: it claimed the job with 75-95% of the file,
rendered that prefix (a read stops at the cached size) and published it. Here, in the
namespaced lab of tests/reliability/netfs_lab.py, two runner hosts poll two spools of one
share, each mounted with one of the option sets of the report; a third host appends to
one upload in each spool every 3 s for 21 s through its own mount (settle_seconds 5:
every gap is shorter). Judged from the server's disk: no claim before the last write,
and the bytes the render read, the run's seal and done/'s job.yaml are all the whole file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from functools import partial
from pathlib import Path

import pytest
import yaml
from netfs_lab import NetfsLab, beacon_hosts, missing, runner_argv, wait_until
from support.uploads_harness import job_hash_command

from spoolrender.spool.layout import SpoolLayout, init_spool

pytestmark = pytest.mark.skipif(missing() is not None, reason=str(missing()))

WRITER = Path(__file__).resolve().parent.parent / "programs" / "slow_writer.py"
# The two option sets of the report: sshfs's own cache and the kernel's (5 s), and the
# kernel's alone.
CACHING_MOUNTS = {
    "a": ("cache=yes", "kernel_cache", "attr_timeout=5", "entry_timeout=5"),
    "b": ("dir_cache=no", "attr_timeout=5", "entry_timeout=5"),
}
SETTLE = 5.0
INTERVAL = 3.0  # the writer's gap between writes (the report's longest): shorter than the settle time
STEPS = 8


def _beacon_of(layout: SpoolLayout, host: str) -> bool:
    return host in beacon_hosts(layout)


def test_slow_upload_from_another_host_is_never_claimed_early_through_caching_mounts(tmp_path: Path) -> None:
    share = tmp_path / "share"
    layouts = {key: init_spool(share / f"spool-{key}") for key in CACHING_MOUNTS}
    config = {"settle_seconds": SETTLE, "poll_seconds": 0.3, "rescan_seconds": 0.5, "slots": 1,
              "commands": {"jobhash": job_hash_command()}}  # fmt: skip
    for layout in layouts.values():
        (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    lab = NetfsLab(tmp_path, share)
    mounted = lab.mountpoint
    logs = {key: tmp_path / f"runner-{key}.log" for key in CACHING_MOUNTS}
    writer_log = tmp_path / "writer.log"
    try:
        for key, options in CACHING_MOUNTS.items():
            lab.host(f"runner-{key}", runner_argv(mounted / f"spool-{key}"), logs[key], sshfs_options=options)
        for key, layout in layouts.items():
            wait_until(partial(_beacon_of, layout, f"runner-{key}"), 90, f"runner-{key} up")
        targets = [str(mounted / f"spool-{key}" / "incoming" / "slow.yaml") for key in CACHING_MOUNTS]
        lab.host("writer", [sys.executable, str(WRITER), str(INTERVAL), str(STEPS), *targets], writer_log)
        wait_until(lambda: '"done"' in writer_log.read_text(), 90, "the writer finished")
        for key, layout in layouts.items():
            wait_until(partial(os.listdir, layout.done), 60, f"spool-{key}: the job done")
    finally:
        lab.close()
    assert str(tmp_path) not in Path("/proc/mounts").read_text(), "a mount outlived the lab"

    steps = [json.loads(line) for line in writer_log.read_text().splitlines() if line.startswith("{")]
    last_write = max(step["t"] for step in steps if "step" in step)
    assert len(steps) == STEPS + 1, steps
    for key, layout in layouts.items():
        log = logs[key].read_text()
        assert "ERROR" not in log and "Traceback" not in log, (key, log[-3000:])
        assert "watch=polling" in log
        (entry,) = os.listdir(layout.done)
        whole = (layout.done / entry / "job.yaml").read_bytes()
        assert whole.count(b"# step ") == STEPS, (key, whole[-300:])  # the writer's last step is in it
        digest = hashlib.sha256(whole).hexdigest()
        record = json.loads((layout.done / entry / "result.json").read_text())
        runs = record["runs"]
        # Never claimed before the last write: every run (a discarded one too) started after
        # it, and settled past it (less a second: SFTP carries whole-second mtimes).
        early = [(r["started"] - last_write, r["outcome"]) for r in runs if r["started"] < last_write + SETTLE - 1]
        assert not early, (key, early, runs)
        published = [r for r in runs if r["outcome"] == "publishing"]
        assert len(published) == 1, (key, runs)
        # The seal, and the bytes the render read (the command hashes {job_file}), are the whole file.
        assert published[0]["details"]["job_sha256"] == digest, (key, runs)
        (output,) = [p for p in (layout.root / "output").iterdir() if not p.name.startswith(".")]
        assert output.read_text() == f"{len(whole)} {digest}", key
        # The start-up probe measured that this mount caches attributes, and said so.
        assert "caches attributes" in log, (key, log[-3000:])
        waited = published[0]["started"] - last_write
        gated = log.count("another host is still writing it")
        print(f"\nspool-{key} {','.join(CACHING_MOUNTS[key])}: claimed {waited:.1f} s after the last write; "
              f"{gated} early claim(s) stopped by revalidation; runs {[r['outcome'] for r in runs]}")  # fmt: skip
