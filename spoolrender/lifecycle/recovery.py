"""Recovering jobs whose runner died: nothing in running/ may stay there forever.

Every runner checks running/ on each rescan. An entry is taken over when its owner is
provably dead (see :mod:`spoolrender.spool.heartbeat`): on the same host at once, by its
released lock; from any host once its heartbeat has been unchanged for the lease.

Taking over a job means deciding its current run, exactly like the owner would, so an
owner that was only paused and wakes up finds the decision made and backs off:
- the run was already decided (the owner died between deciding and moving): carry the
  decision out (roll forward), including publishing an output that was verified;
- otherwise decide it as a failed attempt ("runner died"): to retry/ with backoff while
  attempts are left, else to failed/.

An entry without ``job.yaml`` and ``submitted.yaml`` is a claim abandoned before its job
file was moved in. It is never deleted where it lies: a claimer that only stalled may
complete its rename at any moment. It is first renamed into ``.spoolrender/abandoned/``
(after which the claimer's rename fails with ENOENT and the file stays in incoming/), and
a job file that made it in before that rename goes back to incoming/ (below), never deleted.
What is left of a parked claim is removed on a thread of its own (background_removal): it
may hold the names of a claimer frozen while writing them, whose unlink would wait for it.

A recoverer never creates, renames, removes or opens for writing the dead claim's own
files (its heartbeat, the heartbeat's temporary file, its lock): it reads them, decides the
run with a run file of its own (a name the dead claim writes only to decide the run itself)
and moves the whole directory on (a rename of the directory's name in running/, an entry
of running/, not of the directory). The dead claim's names travel with the job, named by a
token no later claim has, so nothing reads them again. On GlusterFS a host frozen in the
middle of its heartbeat keeps that name locked for as long as it is frozen: anything done
to the name would wait for it (spool/heartbeat.py's docstring, docs/reliability.md).

An entry holding ``submitted.yaml`` but no ``job.yaml`` and no run record is a claim whose
owner died (or stalled) between the claim rename and the private copy (spoolrender.intake.owncopy):
the claim never checked that the file is the one the scan parsed (inode and sha256: its
id, queue and priority came from that parse), and the file is the submitter's to rewrite
meanwhile. So the claim did not happen: the entry is parked like an abandoned claim, and
``submitted.yaml`` goes back to ``incoming/`` (its queue directory, if it came from one),
as ``<id>.yaml`` (a name that gives the file the same default id), with
``renameat2(RENAME_NOREPLACE)``; it is scanned and claimed again as what it is then. If
the file has a name there already (a put back whose link went through although it
reported an error, as below a GlusterFS quorum, or that stopped between the link and the
unlink of RENAME_NOREPLACE's fallback), the parked name is dropped: one job, one name. If
that name is taken by another file, it fails with the reason (kept as evidence). A parked
claim already decided (by another recoverer) is carried out as decided, never decided again. One that also holds run
records is a discarded run of a checked claim (only the owner's continued upload may
change it, see owncopy): decided as a ``requeue`` that uses no attempt, and its retry
claim copies the submitted file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
from collections.abc import Iterator
from pathlib import Path

from spoolrender import defaults
from spoolrender.config.queues import QUEUE_FILENAME
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.failpoints import crash_point
from spoolrender.core.run_error import RunError
from spoolrender.errors import JobInvalid, PublishError
from spoolrender.intake.owncopy import holds_job
from spoolrender.jobfile import parse_job, read_job_bytes
from spoolrender.lifecycle.transitions import carry_out
from spoolrender.spool.background_removal import remove_tree, removing
from spoolrender.spool.clock import CLOCK_OFFSET_KEY, Clock, SpoolClock
from spoolrender.spool.durable import sync_fd
from spoolrender.spool.heartbeat import (
    HOSTNAME,
    Heartbeat,
    LivenessTracker,
    boot_id,
    heartbeat_stat,
    lock_is_free,
    process_start,
    read_heartbeat,
)
from spoolrender.spool.heartbeat_file import read_first_beat
from spoolrender.spool.io_trouble import SpoolIOCondition, attempt_counted, is_spool_io
from spoolrender.spool.layout import RUNNING_NAME, SpoolLayout, list_names, new_token
from spoolrender.spool.probe_dirs import PROBE_PREFIX
from spoolrender.spool.publish import SCRATCH_DIR, remove_scratch, remove_scratch_dir, scratch_name
from spoolrender.spool.queue_dirs import entry_dir
from spoolrender.spool.records import (
    CLAIM_ABANDONED,
    FAILED,
    REQUEUE,
    RETRY,
    RUNNER_DIED,
    SPOOL_IO,
    RunRecord,
    attempts_used,
    decide,
    next_run_number,
    read_run,
    read_runs,
    spool_io_requeues,
)
from spoolrender.spool.spooldir import DirHandle, SpoolPathRefused

log = logging.getLogger(__name__)

ABANDONED_DIR = "abandoned"  # in .spoolrender/: claims taken out of running/ before clearing


class Recoverer:
    def __init__(
        self,
        layout: SpoolLayout,
        config: SpoolConfig,
        clock: Clock,
        rng: random.Random,
        tracker: LivenessTracker | None = None,
        spool_io: SpoolIOCondition | None = None,
        spool_clock: SpoolClock | None = None,
    ) -> None:
        self._spool_io = spool_io
        self._layout = layout
        self._spool_clock = spool_clock
        self._config = config
        self._clock = clock
        self._rng = rng
        self._tracker = tracker or LivenessTracker(clock)

    def sweep(self, own_keys: set[str]) -> list[str]:
        """Recover every dead job in running/ (not ours); returns the names recovered."""
        # Scratch first, running/ second: a scratch dir is made only after its job's
        # running/ entry, so one listed here whose entry is gone below is an orphan.
        scratch_root = self._config.output_root / SCRATCH_DIR
        scratch = list_names(scratch_root)
        # Listed entries are reached through their directory's descriptor, held open while
        # they are judged and recovered (spoolrender.spool.spooldir), never by name from the root.
        with _held(self._layout.running) as running:
            names = [] if running is None else running.names()
            self._tracker.load()
            self._tracker.forget_except(set(names) - own_keys)
            recovered = [] if running is None else self._recover_dead(running, names, own_keys)
            self._tracker.save()
        with _held(self._layout.private / ABANDONED_DIR) as abandoned:
            if abandoned is not None:
                # Left by a recoverer that died between parking a claim and clearing it.
                for parked in abandoned.names():
                    if removing(abandoned.path, parked):
                        continue  # not even a look inside: a hung unlink holds its lock
                    with contextlib.suppress(FileNotFoundError):
                        self._clear_parked(abandoned.anchored(parked))
        # Named by the key's digest; by the key itself in versions before it (a mixed cluster).
        live = {name for key in set(names) | own_keys for name in (key, scratch_name(key))}
        for name in set(scratch) - live:
            if name.startswith(PROBE_PREFIX):
                continue  # a start-up probe's, live or not: spoolrender.spool.probe_dirs judges it
            # Left by a runner killed after its job left running/ (done, failed, retry):
            # nothing in it is needed any more.
            remove_scratch_dir(scratch_root / name)
            log.debug("removed orphaned scratch dir %s", name)
        return recovered

    def _recover_dead(self, running: DirHandle, names: list[str], own_keys: set[str]) -> list[str]:
        recovered = []
        for name in names:
            if name in own_keys:
                continue
            m = RUNNING_NAME.fullmatch(name)
            if m is None:
                continue  # not ours to judge (an operator's stray file); status shows it
            job_dir = running.anchored(name)  # through running/'s descriptor
            why = self._why_dead(name, job_dir, m.group("token"))
            if why is None:
                continue
            try:
                if self.recover(job_dir, m.group("id"), m.group("uid"), m.group("token"), why):
                    recovered.append(name)
            except FileNotFoundError:
                log.debug("%s moved while recovering it; someone else got there first", name)
            except OSError as exc:
                if self._spool_io is not None and is_spool_io(exc):
                    self._spool_io.failed(exc, f"recovering {name}")  # logged there, rate-limited
                else:
                    log.warning("could not recover %s: %s", name, exc)
        return recovered

    def _why_dead(self, name: str, job_dir: Path, token: str) -> str | None:
        # Read only (see the module's docstring): the lock is probed read-only, on this host.
        hb = read_heartbeat(job_dir, token)
        # No heartbeat name yet: a claim killed between writing its first beat into its new
        # lock file and linking it (JobLock.publish_as) is judged by that beat, at once.
        first = read_first_beat(job_dir, token) if hb is None else None
        if first is not None and first.host == HOSTNAME and lock_is_free(job_dir, token):
            return f"runner pid {first.pid} on {first.host} died before its first heartbeat (its lock was released)"
        if hb is not None and hb.host == HOSTNAME and hb.token == token and lock_is_free(job_dir, token):
            if process_start(hb.pid) is not None:  # (or its pid is another process's by now)
                return f"runner pid {hb.pid} on {hb.host} released its lock while still running"
            return f"runner pid {hb.pid} on {hb.host} died (its lock was released)"
        # An unreadable heartbeat still proves life if it keeps being rewritten (the
        # owner replaces the file every beat): then the file's identity is the signature.
        signature: object = (hb.token, hb.counter) if hb is not None else _file_signature(job_dir, token)
        silent = self._tracker.silent_for(name, signature)
        if silent >= self._config.lease_seconds:
            owner = "no heartbeat" if hb is None else f"runner pid {hb.pid} on {hb.host}"
            return f"{owner}: heartbeat unchanged for {silent:.0f} s (lease {self._config.lease_seconds:g} s)"
        return None

    def recover(self, job_dir: Path, job_id: str, uid: str, token: str, why: str) -> bool:
        if not holds_job(job_dir) or _claim_unchecked(job_dir):  # lexists: a symlink is a job too
            # The owner died (or stalled) between preparing the claim and moving the file
            # in (the job file is still in incoming/, or arrives right now), or before it
            # checked and copied the file it moved in (it goes back to incoming/).
            crash_point("abandoned-claim-before-remove")
            parking = self._layout.private / ABANDONED_DIR
            parking.mkdir(exist_ok=True)
            parked = parking / f"{job_dir.name}.{new_token()}"
            # Out of running/ in one rename before anything is deleted: from here on the
            # stalled claimer's rename into running/<job>/job.yaml fails with ENOENT.
            os.rename(job_dir, parked)
            crash_point("abandoned-claim-parked")
            log.info("cleared abandoned claim %s (%s)", job_dir.name, why)
            self._clear_parked(parked)
            return True
        hb = read_heartbeat(job_dir, token)
        if hb is not None and hb.token == token:
            _stop_orphaned_render(hb)
        run = hb.run if hb is not None and hb.token == token else next_run_number(job_dir)
        record = read_run(job_dir, run)
        if record is None:
            owner = hb if hb is not None and hb.token == token else None
            if os.path.lexists(job_dir / defaults.JOB_FILENAME):
                record = self._dead_run_record(job_dir, run, token, why, owner)
            else:  # died before its copy was committed: nothing was rendered
                record = self._requeue_record(job_dir, run, token, "claimed by a runner that died before copying it")
            if not decide(job_dir, record):
                record = read_run(job_dir, run)
                if record is None:
                    return False
            else:
                log.warning("job %s: %s; run %d -> %s", job_id, why, run, record.outcome)
        else:
            log.warning("job %s: %s; finishing its decided run %d (%s)", job_id, why, run, record.outcome)
        try:
            target = carry_out(self._layout, self._config.output_root, job_dir, job_id, uid, record, self._config.hooks)
        except PublishError as exc:  # pragma: no cover - carry_out turns these into failed/
            log.error("job %s: %s", job_id, exc)
            return False
        remove_scratch(self._config.output_root, job_dir.name)
        log.info("job %s recovered to %s/", job_id, target.parent.name)
        return True

    def _clear_parked(self, parked: Path) -> None:
        """Give back, re-queue or delete what a parked claim caught.

        Nothing can enter a parked directory by its running/ name (gone), so a parked claim
        without a job file stays without one: deleting it loses nothing. One holding only
        the submitted file (never checked against the scan) gives it back to incoming/
        (:meth:`_give_back`); one with its copy is sent to retry/ under its uid, with a
        requeue record that uses no attempt; of several runners doing this at once, the
        run file and the rename pick one.
        """
        m = RUNNING_NAME.fullmatch(parked.name.rsplit(".", 1)[0])
        parking = self._layout.private / ABANDONED_DIR
        if m is None or not holds_job(parked):
            remove_tree(parking, parked.name)  # on its own thread: see the module's docstring
            return
        job_id, uid, token = m.group("id"), m.group("uid"), m.group("token")
        if _claim_unchecked(parked):
            if self._give_back(parked, job_id):
                remove_tree(parking, parked.name)  # only the claim's lock, heartbeat, queue
            return  # else failed by _fail_taken (carried out, or rolled forward below next time)
        run = next_run_number(parked)
        last = read_run(parked, run - 1) if run > 1 else None
        if last is not None and last.token == token:
            # Decided for this claim by another recoverer (or by us, before a move that
            # failed): carried out as decided, never decided a second time otherwise.
            record = last
        else:
            stalled = "claimed by a runner that stalled before starting it"
            record = self._requeue_record(parked, run, token, stalled)
            if not decide(parked, record):
                decided = read_run(parked, run)
                if decided is None:
                    return
                record = decided
        target = carry_out(self._layout, self._config.output_root, parked, job_id, uid, record)
        log.warning("job %s: its claim was abandoned after the job file moved in; %s, moved to %s/",
                    job_id, record.outcome, target.parent.name)  # fmt: skip

    def _give_back(self, parked: Path, job_id: str) -> bool:
        """Return the submitted file of an unchecked claim to where it was dropped, as
        ``<job_id>.yaml``; False (and a failed/ entry with the reason) if that name is taken."""
        try:
            queue = (parked / QUEUE_FILENAME).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            queue = ""
        name = f"{job_id}.yaml"
        with contextlib.ExitStack() as held:
            job = held.enter_context(DirHandle.open(parked))
            incoming = held.enter_context(DirHandle.open(self._layout.incoming))
            try:
                where, base = held.enter_context(entry_dir(incoming, f"{queue}/{name}" if queue else name))
            except (SpoolPathRefused, FileNotFoundError, NotADirectoryError):
                queue = ""  # its queue directory is gone or no longer honoured: incoming/ itself
                where, base = held.enter_context(entry_dir(incoming, name))
            held_st = job.stat(defaults.SUBMITTED_FILENAME)
            # Already back: a put back (the claim's, or a recoverer's before us) whose link
            # went through though it reported an error, or that was stopped between its link
            # and its unlink (RENAME_NOREPLACE's fallback). One name of the job is enough.
            back = _named_in(where, held_st, base) is not None
            if not back:
                try:
                    # NOREPLACE: a file dropped under that name meanwhile is never overwritten.
                    job.rename(defaults.SUBMITTED_FILENAME, where, base, replace=False)
                except FileExistsError:
                    if _named_in(where, held_st, base) is None:  # another file took the name
                        self._fail_taken(parked, job_id, name)
                        return False
                    back = True  # ours, linked meanwhile
            # The file's name in incoming/ durable before the parked one (the only other
            # place it was ever named) is deleted: a power cut must not lose the job.
            sync_fd(where.fd)
            if back:
                job.unlink(defaults.SUBMITTED_FILENAME)
        if back:
            log.warning("job %s: its claim stopped before the file was checked and copied; the file was "
                        "back in incoming/ already", job_id)  # fmt: skip
        else:
            log.warning("job %s: its claim stopped before the file was checked and copied; it went back "
                        "to incoming/%s to be scanned again", job_id, f"{queue}/{name}" if queue else name)  # fmt: skip
        return True

    def _fail_taken(self, parked: Path, job_id: str, name: str) -> None:
        """An unchecked claim whose name in incoming/ was taken again: failed, kept as evidence."""
        m = RUNNING_NAME.fullmatch(parked.name.rsplit(".", 1)[0])
        assert m is not None
        message = (f"its claim stopped before the job file was checked against the scan, and its name "
                   f"incoming/{name} was taken again; submit it again")  # fmt: skip
        run = next_run_number(parked)
        record = RunRecord(
            run=run, outcome=FAILED, host=HOSTNAME, pid=os.getpid(), token=m.group("token"), ended=self._clock.wall(),
            error=RunError(CLAIM_ABANDONED, message, False).to_record(),
        )  # fmt: skip
        if not decide(parked, record):
            decided = read_run(parked, run)
            if decided is None:
                return
            record = decided
        carry_out(self._layout, self._config.output_root, parked, job_id, m.group("uid"), record)
        log.warning("job %s: %s", job_id, message)

    def _requeue_record(self, job_dir: Path, run: int, token: str, message: str) -> RunRecord:
        """A claim that never started its job: back to retry/, due now, no attempt used."""
        now = self._clock.wall()
        _, priority = self._job_limits(job_dir)
        return RunRecord(
            run=run, outcome=REQUEUE, host=HOSTNAME, pid=os.getpid(), token=token, ended=now, due=now,
            error=RunError(CLAIM_ABANDONED, message, True).to_record(),
            details={"priority": priority},
        )  # fmt: skip

    def _job_limits(self, job_dir: Path) -> tuple[int, int]:
        """The job's max_attempts and priority, or the spool's defaults if it does not parse
        (read from its private copy, or from the submitted file a claim died before copying)."""
        name = defaults.JOB_FILENAME
        if not os.path.lexists(job_dir / name):
            name = defaults.SUBMITTED_FILENAME
        try:
            spec = parse_job(read_job_bytes(job_dir / name, self._config.max_job_bytes), job_dir.name, self._config)
        except (JobInvalid, OSError):
            return self._config.max_attempts, defaults.DEFAULT_PRIORITY
        return spec.max_attempts, spec.priority

    def _dead_run_record(self, job_dir: Path, run: int, token: str, why: str, owner: Heartbeat | None) -> RunRecord:
        """The outcome of the dead owner's run, written by this (recovering) host.

        ``details.ran_on`` is the host the attempt ran and died on (its heartbeat's; None
        when it died before its first beat), for ``attempt_hosts``. An owner whose last
        heartbeat says it could not write to the spool (a full disk) stopped for the
        filesystem's sake, not the job's: requeued without using an attempt, but for the
        bound on free requeues in a row (``SPOOL_IO_FREE_REQUEUES``).
        """
        owner_host = None if owner is None else owner.host
        runs = read_runs(job_dir)
        kind = RUNNER_DIED
        if owner is not None and owner.spool_io is not None:
            stopped = f"{owner.spool_io} ({why} while it could not write to the spool)"
            requeues = spool_io_requeues(runs)
            if requeues < defaults.SPOOL_IO_FREE_REQUEUES:
                _, priority = self._job_limits(job_dir)
                return RunRecord(
                    run=run, outcome=REQUEUE, host=HOSTNAME, pid=os.getpid(), token=token, ended=self._clock.wall(),
                    due=self._clock.wall(),
                    error=RunError(SPOOL_IO, f"{stopped}; requeued without using an attempt", True).to_record(),
                    details={"priority": priority, "ran_on": owner_host},
                )  # fmt: skip
            kind, why = SPOOL_IO, f"{stopped}; {attempt_counted(requeues)}"
        attempt = attempts_used(runs) + 1
        max_attempts, priority = self._job_limits(job_dir)
        now = self._clock.wall()
        error = RunError(kind, why, True)
        delay = self._config.job_retry.with_attempts(max_attempts).retry_in(attempt, self._rng)
        outcome = FAILED if delay is None else RETRY
        due = None if delay is None else now + delay
        if delay is None:
            error = error.with_message(f"{why}; no attempts left ({attempt} of {max_attempts})")
        return RunRecord(
            run=run,
            outcome=outcome,
            host=HOSTNAME,
            pid=os.getpid(),
            token=token,
            ended=now,
            attempt=attempt,
            error=error.to_record(),
            due=due,
            details={"priority": priority, "ran_on": owner_host, **self._clock_offset()},
        )

    def _clock_offset(self) -> dict[str, float]:
        """This host's wall clock minus the spool's, for the record (both clocks, see spool/clock.py)."""
        offset = None if self._spool_clock is None else self._spool_clock.offset()
        return {} if offset is None else {CLOCK_OFFSET_KEY: round(offset, 3)}


@contextlib.contextmanager
def _held(directory: Path) -> Iterator[DirHandle | None]:
    """``directory`` open (spoolrender.spool.spooldir), or None when it is missing (lists as empty)."""
    try:
        handle = DirHandle.open(directory)
    except FileNotFoundError:
        yield None
        return
    with handle:
        yield handle


def _stop_orphaned_render(hb: Heartbeat) -> None:
    """Kill the dead owner's render process group, when it ran on this host.

    A runner killed with SIGKILL cannot stop its render, which would go on burning CPU
    and writing into a scratch directory nobody will publish. The group id came from
    the owner's heartbeat, and is killed only if it provably still is that render: the
    same boot of this host, and a group leader that started at the recorded time (after
    a reboot or a pid wrap-around the number may name an unrelated group). A heartbeat
    without both (an older version's) kills nothing; a group of ours is never a target.
    """
    if hb.host != HOSTNAME or not hb.pgid or hb.pgid == os.getpgrp():
        return
    if hb.boot is None or hb.pgid_start is None or hb.boot != boot_id():
        return
    try:
        if os.getpgid(hb.pgid) != hb.pgid or process_start(hb.pgid) != hb.pgid_start:
            return  # gone, or its number now belongs to another process
        os.killpg(hb.pgid, signal.SIGKILL)
    except OSError:
        return
    log.info("killed process group %d left behind by dead runner pid %d", hb.pgid, hb.pid)


def _claim_unchecked(job_dir: Path) -> bool:
    """Whether ``job_dir`` holds a claimed file that no claim checked and copied: the
    submitted file, no copy, and no run record (a discarded run has one: its claim was
    checked), or only the ``claim-abandoned`` requeues an older version decided for it."""
    if os.path.lexists(job_dir / defaults.JOB_FILENAME) or not os.path.lexists(job_dir / defaults.SUBMITTED_FILENAME):
        return False
    return all(r.outcome == REQUEUE and (r.error or {}).get("kind") == CLAIM_ABANDONED for r in read_runs(job_dir))


def _named_in(where: DirHandle, st: os.stat_result, first: str) -> str | None:
    """A name in ``where`` of the file ``st`` (``first`` tried first), or None. Only a file
    with more than one link can have one: the directory is listed only then."""
    names = [first] + (where.names() if st.st_nlink > 1 else [])
    for name in names:
        try:
            there = where.try_stat(name)
        except OSError:
            continue
        if there is not None and os.path.samestat(there, st):
            return name
    return None


def _file_signature(job_dir: Path, token: str) -> tuple[int | None, tuple[int, int, int] | None]:
    """What changes while an owner lives, when its heartbeat cannot be read.

    The directory's mtime is part of it: every heartbeat is an atomic replace, a rename
    into the directory, so it changes with each beat even while the file is missing or
    garbled at the moments we look. "No file" alone would be the same value every time,
    and two looks that both catch it missing a lease apart would read as a lease of silence.
    """
    try:
        dir_mtime: int | None = os.stat(job_dir).st_mtime_ns
    except OSError:
        dir_mtime = None
    st = heartbeat_stat(job_dir, token)
    return (dir_mtime, None if st is None else (st.st_ino, st.st_mtime_ns, st.st_size))
