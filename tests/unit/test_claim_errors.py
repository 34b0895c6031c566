"""An error at each step of a claim in turn, then recovery: every job ends in exactly one state.

The claim's system calls (mkdir, open, read, write, fsync, fchmod, stat, rename,
renameat2, link, unlink) are counted, and from the n-th one on they fail with ENOSPC, for
every n until a claim makes fewer calls than that. Two faults: the n-th call alone fails
(``once``: any step, whatever the error), or the disk is full from then on (``full``:
mkdir, creates, writes and links fail, renames, unlinks, reads and fsyncs work, as on a
GlusterFS volume with two of three bricks full, issue 26's "A full brick"; recovery runs
once while it is full, as it did there). Two ways of failing: before the call (nothing
happened), and after it (it happened, and the caller is told it failed: what a volume
below its quorum does to a create or a link that one brick carried out). And two
filesystems: with RENAME_NOREPLACE, and without it (GlusterFS's FUSE client: a put back is
a link and an unlink). Then the disk has room again, recovery runs and the spool is
drained: the job is published once, is in done/ alone, used one attempt, and no failed/
entry, claim directory or parked claim is left.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.unit_spool import Slot, entries

from spoolrender.lifecycle.recovery import ABANDONED_DIR, Recoverer
from spoolrender.run.run_end import RunEnd
from spoolrender.spool import spooldir

JOB = {"composition": "Intro", "output": "intro.mp4"}
# Calls that touch the spool; a failure of os.close is not one a claim could act on.
CALLS = ("mkdir", "open", "read", "write", "fsync", "fchmod", "stat", "rename", "replace", "link", "unlink")
# Calls that can have happened although they report an error (a replica that kept them).
DONE_THEN_FAILED = ("mkdir", "open", "rename", "replace", "link", "unlink")


# What a full disk refuses (the rest works: docs/reliability.md "A full brick").
FULL_REFUSES = ("mkdir", "open", "write", "link", "renameat2")


class Injector:
    """Fails the ``target``-th counted call with ENOSPC (``after``: once it has been made);
    ``full``: every later call a full disk refuses too, until :meth:`free`."""

    def __init__(self, target: int, *, after: bool, full: bool) -> None:
        self.target = target
        self.after = after
        self.full = full
        self.calls = 0
        self.failed: str | None = None
        self.freed = False

    def free(self) -> None:
        self.freed = True

    def _fails(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        if self.freed:
            return False
        if self.failed is not None:
            return self.full and name in FULL_REFUSES and _makes_something(name, args, kwargs)
        self.calls += 1
        if self.calls != self.target:
            return False
        self.failed = name
        return True

    def wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if not self._fails(name, args, kwargs):
                return real(*args, **kwargs)
            if self.after and name in DONE_THEN_FAILED:
                result = real(*args, **kwargs)
                if name == "open":
                    os.close(result)  # made (O_CREAT), yet the caller gets no descriptor
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        return call

    def wrap_renameat2(self, real: Callable[..., int]) -> Callable[..., int]:
        def call(*args: Any) -> int:
            if not self._fails("renameat2", args, {}):
                return real(*args)
            if self.after and real(*args) != 0:
                return -1  # its own error stands
            ctypes.set_errno(errno.ENOSPC)
            return -1

        return call


def _makes_something(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call a full disk refuses needs room: an open that creates a file."""
    if name != "open":
        return True
    flags = args[1] if len(args) > 1 else kwargs.get("flags", 0)
    return bool(flags & os.O_CREAT)


@contextmanager
def injected(monkeypatch: pytest.MonkeyPatch, injector: Injector, noreplace: bool) -> Iterator[None]:
    with monkeypatch.context() as patch:
        for name in CALLS:
            patch.setattr(os, name, injector.wrap(name, getattr(os, name)))
        real = spooldir._RENAMEAT2
        if noreplace and real is not None:
            patch.setattr(spooldir, "_RENAMEAT2", injector.wrap_renameat2(real))
        else:
            patch.setattr(spooldir, "_RENAMEAT2", None)  # the filesystem lacks the flag
        yield


def recover_and_drain(slot: Slot) -> None:
    """Recovery as the runners' sweeps do it (a lease apart: a claim that left no heartbeat
    is judged by the lease), and every candidate claimed and run, until nothing moves."""
    recoverer = Recoverer(slot.layout, slot.config, slot.clock, random.Random(27))
    for _ in range(10):
        recoverer.sweep(set())
        slot.clock.advance(slot.config.lease_seconds + 1)
        recoverer.sweep(set())
        slot.scanner.note_event("", "")
        candidates = slot.scan().candidates
        if not candidates and not entries(slot.layout, "running"):
            return
        for candidate in candidates:
            taken = slot.claim(candidate)
            if taken is not None:
                slot.executor.execute(taken)
    raise AssertionError(f"the spool did not settle: {where(slot)}")


def where(slot: Slot) -> dict[str, list[str]]:
    states = ("incoming", "running", "retry", "done", "failed")
    found = {state: entries(slot.layout, state) for state in states}
    abandoned = slot.layout.private / ABANDONED_DIR
    found["abandoned"] = sorted(os.listdir(abandoned)) if abandoned.exists() else []
    return {state: names for state, names in found.items() if names}


def one_claim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, injector: Injector, noreplace: bool) -> Injector:
    slot = Slot(tmp_path / f"spool-{injector.target}")
    try:
        slot.drop("intro.yaml", JOB)
        [candidate] = slot.scan().candidates
        with injected(monkeypatch, injector, noreplace):
            try:
                taken = slot.claim(candidate)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                taken = None
            if injector.failed is None:
                assert taken is not None  # no failure: the claim's normal end
            if injector.full and taken is None:
                # A recoverer while the disk is full (the claim's lock is free: at once).
                recoverer = Recoverer(slot.layout, slot.config, slot.clock, random.Random(27))
                with contextlib.suppress(OSError):
                    recoverer.sweep(set())
            injector.free()
        if taken is not None:
            slot.executor.execute(taken)
        recover_and_drain(slot)
        how = "after" if injector.after else "instead of"
        step = f"ENOSPC {how} call {injector.target} ({injector.failed}){', disk full' if injector.full else ''}"
        found = where(slot)
        assert list(found) == ["done"] and len(found["done"]) == 1, (step, found)
        [done] = found["done"]
        assert done.startswith("intro."), (step, done)
        result = json.loads((slot.layout.done / done / "result.json").read_text())
        outcomes = [run["outcome"] for run in result["runs"]]
        assert outcomes.count("publishing") == 1 and "failed" not in outcomes, (step, outcomes)
        assert result["attempts"] == 1, (step, result["attempts"], outcomes)
        assert [run.job_id for run in slot.fake.runs] == ["intro"], (step, slot.fake.runs)
        return injector
    finally:
        slot.close()


@pytest.mark.parametrize("noreplace", [True, False], ids=["renameat2", "link-unlink"])
@pytest.mark.parametrize("after", [False, True], ids=["failed", "done-then-failed"])
@pytest.mark.parametrize("full", [False, True], ids=["once", "full"])
def test_enospc_at_each_step_of_a_claim_leaves_the_job_in_exactly_one_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, full: bool, after: bool, noreplace: bool
) -> None:
    target = 1
    while one_claim(tmp_path, monkeypatch, Injector(target, after=after, full=full), noreplace).failed is not None:
        target += 1
    assert target > 10  # every step of a whole claim was failed in turn


@pytest.mark.parametrize(
    ("error", "looked_up"),
    [(errno.ENOTCONN, True), (errno.ENOTCONN, False), (errno.ENOSPC, False)],
    ids=["enotconn-looked-up", "enotconn-unknown", "enospc-tried-again"],
)
def test_a_decision_whose_link_reports_an_error_though_made_is_carried_out_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int, looked_up: bool
) -> None:
    """Issue 26's full brick, a run's record: its link into ``run-0001.json`` made on one
    brick, the client answering an error. The run knows its decision when it can look (its
    temporary file's inode is the name's; or, tried again after ENOSPC, the record's bytes
    are its own) and publishes; when it cannot (ENOTCONN, no look), it leaves the job to
    recovery with the verified output kept, and recovery publishes it. Never a recoverer
    finding the decision without its output ("vanished before publishing": failed/)."""
    slot = Slot(tmp_path / "spool")
    try:
        slot.drop("intro.yaml", JOB)
        [candidate] = slot.scan().candidates
        taken = slot.claim(candidate)
        assert taken is not None
        real_link, real_stat = os.link, os.stat
        made: list[str] = []

        def link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            real_link(src, dst, *args, **kwargs)
            if str(dst).endswith("run-0001.json") and not made:
                made.append(str(dst))
                raise OSError(error, os.strerror(error), str(src), None, str(dst))

        def lookup(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            if not looked_up and len(made) == 1 and str(path).endswith("run-0001.json"):
                made.append("no look")  # once: the name is readable nowhere for now
                raise OSError(errno.ENOTCONN, os.strerror(errno.ENOTCONN), str(path))
            return real_stat(path, *args, **kwargs)

        with monkeypatch.context() as patch:
            patch.setattr(os, "link", link)
            patch.setattr(os, "stat", lookup)
            try:
                end: RunEnd | None = slot.executor.execute(taken)
            except OSError as exc:  # as the runner's slot does: left to recovery
                assert exc.errno == errno.ENOTCONN and not looked_up, exc
                end = None
        assert made
        recover_and_drain(slot)
        found = where(slot)
        assert (list(found), len(found["done"])) == (["done"], 1), (end, found)
        assert end is None or end.state == "done", end
        assert (slot.config.output_root / "intro.mp4").exists()
        assert [run.job_id for run in slot.fake.runs] == ["intro"]
        [done] = found["done"]
        outcomes = [r["outcome"] for r in json.loads((slot.layout.done / done / "result.json").read_text())["runs"]]
        assert outcomes == ["publishing"], outcomes
    finally:
        slot.close()
