"""What people and followers are shown, and what a mount is judged by: the runner's live
display, its ETA, the wake-up of Job.wait(), a job's current events for a follower, the
GlusterFS client check and the fanotify follower's descriptor caps."""

from __future__ import annotations

import io
import json
import resource
from pathlib import Path

import pytest
from rich.console import Console
from support.frame_fake import FrameFake
from support.unit_spool import Slot

from spoolrender import defaults
from spoolrender.cli.live_display import live_wanted, render_view
from spoolrender.intake.upload_closers import pidfd_caps
from spoolrender.ops.outcome_events import OutcomeEvents
from spoolrender.ops.runner_view import FailureView, RunnerView, SlotView, eta_seconds
from spoolrender.runner.loop import RunSummary
from spoolrender.serve.events import current_job_events
from spoolrender.spool.glusterfs import ClientView, mount_problems, read_client


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_live_display_is_drawn_only_on_a_terminal_outside_systemd() -> None:
    assert live_wanted(Terminal(), {"TERM": "xterm"}, refused=False)
    assert not live_wanted(Terminal(), {"TERM": "xterm"}, refused=True)  # --no-live
    assert not live_wanted(io.StringIO(), {"TERM": "xterm"}, refused=False)
    assert not live_wanted(Terminal(), {"TERM": "xterm", "INVOCATION_ID": "x"}, refused=False)
    assert not live_wanted(Terminal(), {"TERM": "dumb"}, refused=False)


def test_a_frame_of_the_live_display_says_each_slot_and_the_last_failure() -> None:
    view = RunnerView(
        slots=(SlotView(0, "intro", run=2, progress=0.25, stage="rendering", elapsed=30, eta=90), SlotView(1, None)),
        claimed=3, done=1, failed=1, retried=0, requeued=0, waiting=4, drain=True, stopping=False, paused=True,
        failures=(FailureView("bad\x1b[2J", "failed", "bad-props", "props are wrong\nand more", 0.0),),
    )  # fmt: skip
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(render_view(view))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "intro (run 2)" in text and "25%" in text and "0:30" in text and "1:30" in text
    assert "idle" in text
    assert "drain: 3 claimed, 1 running, 1 done, 0 to retry, 1 failed, 4 waiting  (spool paused)" in text
    assert "bad\\x1b[2J  failed  bad-props: props are wrong" in text  # escaped, first line only
    assert "and more" not in text
    assert eta_seconds(30, 0.25) == 90
    assert eta_seconds(30, None) is None and eta_seconds(30, 1.0) is None
    with pytest.raises(ValueError, match=r"progress must be from 0 to 1, got 1\.5"):
        SlotView(0, "x", progress=1.5)


def test_job_wait_is_woken_by_a_move_into_done(tmp_path: Path) -> None:
    slot = Slot(tmp_path / "spool")
    slot.drop("intro.yaml", {"composition": "Intro"})
    events = OutcomeEvents(slot.config)
    with events as changed:  # watchdog's thread, stopped and joined on leaving
        if events._observer is None:  # no inotify instance left on a busy host: it polls instead
            pytest.skip("no inotify instance free: OutcomeEvents falls back to polling")
        assert not changed.is_set()
        assert slot.run_next().state == "done"
        assert changed.wait(timeout=30)


def test_a_follower_is_told_where_a_job_is_now(tmp_path: Path) -> None:
    slot = Slot(tmp_path / "spool", fake=FrameFake())
    slot.drop("long.yaml", {"composition": "Long", "chunks": 2, "props": {"frames": 60}})
    assert slot.run_next().state == "split"
    [(kind, state), (kind2, progress)] = current_job_events(slot.config, "long")
    assert (kind, state["state"], state["initial"]) == ("state", "split", True)
    assert (kind2, progress["state"]) == ("progress", "split")
    assert current_job_events(slot.config, "nosuch") == []


def gluster_meta(root: Path, volfile: str, cmdline: str) -> Path:
    (root / ".meta" / "graphs" / "active").mkdir(parents=True)
    (root / ".meta" / "graphs" / "active" / "volfile").write_text(volfile)
    (root / ".meta" / "cmdline").write_text(json.dumps({"Cmdlinestr": cmdline}))
    return root


def test_a_glusterfs_client_is_judged_by_its_translators_and_flags(tmp_path: Path) -> None:
    volfile = "volume v-md\n    type performance/md-cache\n    option md-cache-timeout 5\nend-volume\n"
    cmdline = "/usr/sbin/glusterfs --volfile-id=/renders --attribute-timeout=0 --entry-timeout=0 --negative-timeout=0"
    view = read_client(gluster_meta(tmp_path / "a", volfile, cmdline))
    assert (view.volume, view.md_cache_timeout, view.direct_io) == ("renders", 5.0, False)
    refusals, warnings = mount_problems(view)
    assert refusals == []
    assert warnings == [
        "another host's renames, unlinks and rewrites are seen up to performance.md-cache-timeout (5 s) late: keep "
        "lease_seconds and settle_seconds well above that, or run `gluster volume set renders "
        "performance.stat-prefetch off`"
    ]
    bare = ClientView(frozenset({"cluster/replicate"}), 1.0, ("/usr/sbin/glusterfs",))
    refusals, warnings = mount_problems(bare)
    assert len(refusals) == 1 and refusals[0].endswith("Mount with -o direct-io-mode=enable")
    assert [w.rsplit(" ", 1)[1] for w in warnings] == ["majority`", "attribute-timeout=0", "entry-timeout=0"]
    assert "`gluster volume set VOLUME cluster.favorite-child-policy majority`" in warnings[0]
    assert mount_problems(ClientView(frozenset(), 1.0, ("g", "--direct-io-mode=enable", "--attribute-timeout=0",
                                                        "--entry-timeout=0")))[0] == []  # fmt: skip


def test_a_glusterfs_client_warns_about_each_caching_translator_and_kernel_cache(tmp_path: Path) -> None:
    """Each of the caching options docs/reliability.md ("GlusterFS: the supported options")
    turns off, found on in the client's graph or command line, is a warning naming it."""
    caches = ("quick-read", "io-cache", "readdir-ahead")
    volfile = "".join(f"volume v-{name}\n    type performance/{name}\nend-volume\n" for name in caches)
    cmdline = "/usr/sbin/glusterfs --volfile-id=/renders --direct-io-mode=enable --negative-timeout=2"
    refusals, warnings = mount_problems(read_client(gluster_meta(tmp_path, volfile, cmdline)))
    assert refusals == []
    assert [w.rsplit(" ", 1)[0].rsplit(" ", 1)[1] for w in warnings[:3]] == [f"performance.{name}" for name in caches]
    assert all(w.endswith(" off`") and "`gluster volume set renders " in w for w in warnings[:3]), warnings
    timeouts = ["attribute-timeout=0", "entry-timeout=0", "negative-timeout=0"]
    assert [w.rsplit(" ", 1)[1] for w in warnings[3:]] == timeouts


def test_a_replicated_glusterfs_client_without_a_favorite_child_policy_is_warned_about(tmp_path: Path) -> None:
    """Two of three bricks full: a failed replace can leave a gfid split-brain that only a
    favorite-child policy heals by itself (docs/reliability.md "A full brick")."""
    replicate = "volume r-replicate-0\n    type cluster/replicate\n{}end-volume\n"
    cmdline = (
        "/usr/sbin/glusterfs --volfile-id=/renders --direct-io-mode=enable --attribute-timeout=0 --entry-timeout=0"
    )
    unset = read_client(gluster_meta(tmp_path / "a", replicate.format(""), cmdline))
    assert unset.favorite_child_policy == "none"
    assert mount_problems(unset) == ([], [mount_problems(unset)[1][0]])
    assert "cluster.favorite-child-policy majority" in mount_problems(unset)[1][0]
    majority = read_client(
        gluster_meta(tmp_path / "b", replicate.format("    option favorite-child-policy majority\n"), cmdline)
    )
    assert majority.favorite_child_policy == "majority"
    assert mount_problems(majority) == ([], [])
    one_brick = read_client(gluster_meta(tmp_path / "c", "volume d\n    type storage/posix\nend-volume\n", cmdline))
    assert mount_problems(one_brick) == ([], [])  # not replicated: no split-brain to heal


def test_the_closers_follower_keeps_its_descriptors_within_the_limit() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    total, per_uid = pidfd_caps(None, None)
    if soft != resource.RLIM_INFINITY:
        assert total <= soft // defaults.CLOSER_PIDFDS_FD_LIMIT_SHARE
    assert 0 <= per_uid <= total
    small_total, small_per_uid = pidfd_caps(10, 50)
    assert small_total <= 10 and small_per_uid == small_total  # one user never gets more than all
    assert pidfd_caps(0, 5) == (0, 0)


def test_a_runs_summary_line_says_how_it_ended_and_only_the_counts_that_happened() -> None:
    summary = RunSummary(claimed=5, done=3, failed=1, retried=1, stopped_by="drained")
    assert summary.describe() == "drained: 5 claimed, 3 done, 1 to retry, 0 put back, 1 failed"
    summary = RunSummary(claimed=4, done=1, lost=1, split=1, chunks=2, paused=True, blocked=True)
    assert summary.describe() == (
        "signal: 4 claimed, 1 done, 0 to retry, 0 put back, 0 failed, 1 lost to another runner, "
        "1 split into chunks, 2 chunk runs (spool paused) (this host blocked)"
    )
