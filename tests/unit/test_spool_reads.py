"""What is read back from a spool without a runner: waiting jobs by route from incoming/'s
files, the outputs index (who published a name last), render cache key digests, and the
watch mode chosen for the spool's filesystem."""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

import pytest
from support.unit_spool import drop_job

from spoolrender.intake.watch import choose_watch_mode, filesystem_type, is_network_filesystem
from spoolrender.ops.listed_routes import listed_groups
from spoolrender.render_cache.keys import FileDigests, digest_of, sha256_file, stat_identity
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.output_index import LastPublish, entry_path, last_publish, record_publish
from spoolrender.spool.publish import RenderedFile
from spoolrender.testing import make_spool


@pytest.fixture
def layout(tmp_path: Path) -> SpoolLayout:
    return SpoolLayout(make_spool(tmp_path / "spool", {"queues": ["urgent", "default"]}).spool)


def test_waiting_jobs_are_counted_by_queue_and_tags_from_their_files(layout: SpoolLayout) -> None:
    drop_job(layout, "a.yaml", {"composition": "A", "queue": "urgent", "requires": ["gpu"]}, age=300)
    drop_job(layout, "b.yaml", {"composition": "B", "requires": "gpu"}, age=200)
    drop_job(layout, "urgent/c.yaml", {"composition": "C", "queue": "default"}, age=100)  # the directory wins
    drop_job(layout, "d.yaml", "composition: [broken\n", age=50)  # counted where it was dropped
    names = ["a.yaml", "b.yaml", "urgent/c.yaml", "d.yaml", "gone.yaml"]
    groups = listed_groups(layout.incoming, names, read_limit=10, max_bytes=65536)
    counts = {(g["queue"], tuple(g["requires"])): g["count"] for g in groups}
    assert counts == {("default", ()): 1, ("default", ("gpu",)): 1, ("urgent", ()): 1, ("urgent", ("gpu",)): 1}
    oldest = {(g["queue"], tuple(g["requires"])): g["oldest"] for g in groups}
    assert oldest[("urgent", ("gpu",))] == pytest.approx(os.stat(layout.incoming / "a.yaml").st_mtime)
    # Past read_limit a file is not read: it counts under its directory's queue, without tags.
    shallow = listed_groups(layout.incoming, names, read_limit=0, max_bytes=65536)
    assert {(g["queue"], tuple(g["requires"])): g["count"] for g in shallow} == {("default", ()): 3, ("urgent", ()): 1}


def test_the_outputs_index_remembers_the_last_publisher_of_a_name(layout: SpoolLayout, tmp_path: Path) -> None:
    rel = PurePosixPath("films/week-48.mp4")
    assert last_publish(layout, rel) is None
    first = RenderedFile(inode=11, bytes=1000, mtime_ns=5)
    record_publish(layout, rel, "intro", "0123456789ab", first)
    assert last_publish(layout, rel) == LastPublish("intro", "0123456789ab", first)
    again = RenderedFile(inode=12, bytes=2000, mtime_ns=6)
    record_publish(layout, rel, "intro.v2", "ba9876543210", again)
    assert last_publish(layout, rel) == LastPublish("intro.v2", "ba9876543210", again)
    assert last_publish(layout, PurePosixPath("films/other.mp4")) is None
    # An entry that names another output (a hash collision) or is damaged proves nothing.
    entry = entry_path(layout, rel)
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "output": "films/other.mp4"}))
    assert last_publish(layout, rel) is None
    entry.write_text("{not json")
    assert last_publish(layout, rel) is None
    with pytest.raises(ValueError, match="a publish needs a job id and uid"):
        LastPublish("", "0123456789ab", first)


def test_cache_key_digests_are_canonical_and_file_digests_follow_the_file(tmp_path: Path) -> None:
    assert digest_of({"b": 1, "a": [1, "é"]}) == digest_of({"a": [1, "é"], "b": 1})
    assert digest_of({"a": 1}) != digest_of({"a": 1.5}) != digest_of({"a": "1"})
    with pytest.raises(ValueError):
        digest_of({"a": float("nan")})  # no key from a value JSON cannot say
    program = tmp_path / "render.py"
    program.write_bytes(b"print('v1')\n")
    digests = FileDigests()
    first = digests.of(program)
    assert first == sha256_file(program)
    program.write_bytes(b"print('v2')\n")  # a new version: size or mtime differ
    os.utime(program, ns=(1, 1))
    assert digests.of(program) != first
    assert stat_identity(tmp_path / "missing") == [str(tmp_path / "missing"), None, None]
    assert stat_identity(program) == [str(program), 12, 1]


def test_the_watch_mode_follows_the_filesystem_unless_it_is_set(tmp_path: Path) -> None:
    local = not is_network_filesystem(tmp_path)
    assert choose_watch_mode("auto", tmp_path) == ("inotify" if local else "polling")
    assert choose_watch_mode("polling", tmp_path) == "polling"
    assert choose_watch_mode("inotify", tmp_path) == "inotify"
    assert filesystem_type(Path("/proc")) == "proc"
    assert not is_network_filesystem(Path("/proc"))
