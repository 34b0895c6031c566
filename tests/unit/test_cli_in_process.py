"""The `spoolrender` commands called in this process (cli.main.main, no subprocess) over a
unit spool whose jobs the executor ran: exit statuses, what each prints, what it moves."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from support.unit_spool import Slot, entries

import spoolrender
from spoolrender import defaults
from spoolrender.cli.exit_codes import EXIT_ERROR, EXIT_OK, EXIT_USAGE
from spoolrender.cli.main import main
from spoolrender.testing import Fail


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    """A spool with one job done (intro) and one failed for good (bad)."""
    slot = Slot(tmp_path / "spool")
    slot.fake.script("bad", Fail("bad-props", transient=False, message="props are wrong"))
    slot.drop("bad.yaml", {"composition": "Bad", "output": "bad.mp4"}, age=120)
    slot.drop("intro.yaml", {"composition": "Intro", "output": "intro.mp4"}, age=60)
    assert slot.run_next().state == "failed"
    assert slot.run_next().state == "done"
    return slot


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_submit_queues_a_checked_job_atomically(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slot = Slot(tmp_path / "spool")
    job = tmp_path / "recap.yaml"
    job.write_text("composition: Recap\noutput: recap.mp4\npriority: 3\n")
    status, out, _ = cli(capsys, "submit", "--spool", str(slot.layout.root), str(job))
    assert (status, out.strip()) == (EXIT_OK, str(slot.layout.incoming / "recap.yaml"))
    assert entries(slot.layout, "incoming") == ["recap.yaml"]
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("composition: Recap\npriority: urgent\nmax_attempts: 0\n")
    status, out, err = cli(capsys, "submit", "--spool", str(slot.layout.root), str(wrong))
    assert status == EXIT_ERROR
    assert "priority" in out + err and "max_attempts" in out + err  # every problem at once
    assert entries(slot.layout, "incoming") == ["recap.yaml"]  # the refused one is not queued


def test_status_counts_each_state_and_names_the_last_failure(slot: Slot, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(capsys, "status", "--spool", str(slot.layout.root), "--json")
    document = json.loads(out)
    assert status == EXIT_OK
    assert document["counts"] == {"done": 1, "failed": 1, "incoming": 0, "retry": 0, "running": 0, "split": 0}
    [failure] = document["recent_failures"]
    assert (failure["id"], failure["kind"], failure["reason"]) == ("bad", "bad-props", "props are wrong")
    status, out, _ = cli(capsys, "status", "--spool", str(slot.layout.root))
    assert "incoming 0  running 0  retry 0  done 1  failed 1" in out


def listed_dirs(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The directories os.listdir and os.scandir are asked for from now on (by path or by
    descriptor), whoever asks: every listing, however it is reached."""
    listed: list[Path] = []

    def counting(original: Any) -> Any:
        def call(path: Any = ".") -> Any:
            listed.append(Path(os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else os.fsdecode(path)))
            return original(path)

        return call

    for name in ("listdir", "scandir"):
        monkeypatch.setattr(os, name, counting(getattr(os, name)))
    return listed


def test_status_text_lists_what_status_json_lists_done_once(
    slot: Slot, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text is the document formatted, no more: at a million done jobs a second listing
    of done/ would cost what the first does (0.4 s of CPU here; bench/status_scale.py)."""
    listed = listed_dirs(monkeypatch)
    by_mode = {}
    for mode in (["--json"], []):
        listed.clear()
        assert cli(capsys, "status", "--spool", str(slot.layout.root), *mode)[0] == EXIT_OK
        by_mode[bool(mode)] = sorted(map(str, listed))
        assert listed.count(slot.layout.done) == 1, listed
    assert by_mode[False] == by_mode[True]


def test_show_finds_a_job_by_id_and_hints_at_a_near_miss(slot: Slot, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(capsys, "show", "--spool", str(slot.layout.root), "intro")
    assert status == EXIT_OK
    assert out.startswith("intro: done")
    assert f"output: {slot.config.output_root / 'intro.mp4'} (1024 bytes" in out
    status, out, err = cli(capsys, "show", "--spool", str(slot.layout.root), "intr")
    assert (status, out) == (EXIT_ERROR, "")
    assert err.strip().endswith("no job with id 'intr' in " + str(slot.layout.root) + "; did you mean 'intro'?")


def test_list_pages_one_state_newest_first(slot: Slot, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = cli(capsys, "list", "--spool", str(slot.layout.root), "failed")
    lines = out.splitlines()
    assert status == EXIT_OK
    assert lines[0].split() == ["STATE", "ID", "WHEN", "QUEUE", "DETAIL"]
    assert lines[1].split()[:2] == ["failed", "bad"] and "props are wrong" in lines[1]
    assert lines[-1] == "failed jobs 1-1 of 1, newest first"


def test_retry_gives_a_failed_job_fresh_attempts(slot: Slot, capsys: pytest.CaptureFixture[str]) -> None:
    [entry] = entries(slot.layout, "failed")
    status, out, _ = cli(capsys, "retry", "--spool", str(slot.layout.root), "bad")
    assert (status, out.strip()) == (EXIT_OK, f"failed/{entry}: back to retry/, due now, with fresh attempts")
    assert entries(slot.layout, "failed") == []
    slot.fake.script("bad", Fail("bad-props", transient=False))
    slot.advance(5)  # due "now" by the command's (real) clock, a moment after the slot's
    slot.scanner.note_event("", "")
    end = slot.run_next()
    assert (end.state, end.attempts) == ("failed", 1)  # attempt 1 again: fresh ones


def test_pause_stops_claims_until_resume(slot: Slot, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(slot.layout.root)
    assert cli(capsys, "pause", "--spool", root)[0] == EXIT_OK
    assert (slot.layout.private / defaults.PAUSE_FILENAME).exists()
    assert "PAUSED: paused by operator" in cli(capsys, "status", "--spool", root)[1]
    assert cli(capsys, "resume", "--spool", root)[1].strip() == "resumed"
    assert not (slot.layout.private / defaults.PAUSE_FILENAME).exists()


def test_cancel_fails_a_waiting_job_and_rerun_queues_a_done_one(slot: Slot, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(slot.layout.root)
    status, out, _ = cli(capsys, "rerun", "--spool", root, "intro")
    assert status == EXIT_OK and out.startswith(f"{slot.layout.incoming / 'intro.yaml'}: a new run of intro")
    assert entries(slot.layout, "incoming") == ["intro.yaml"]
    status, out, _ = cli(capsys, "cancel", "--spool", root, "intro")
    assert status == EXIT_OK and out.startswith("incoming/intro.yaml: moved to failed/intro.")
    assert entries(slot.layout, "incoming") == []
    assert len(entries(slot.layout, "failed")) == 2
    assert (slot.config.output_root / "intro.mp4").exists()  # the done run's output stays


def test_an_unknown_command_is_a_usage_error_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(capsys, "statsu", "--spool", "/nonexistent")
    assert (status, out) == (EXIT_USAGE, "")
    assert "unknown command 'statsu'; did you mean 'status'?" in err


def test_init_makes_a_spool_and_says_what_it_lacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = cli(capsys, "init", str(tmp_path / "new"))
    assert (status, out.strip()) == (EXIT_OK, f"spool ready at {tmp_path / 'new'}")
    assert "no Remotion project set" in err
    for state in ("incoming", "running", "retry", "done", "failed"):
        assert (tmp_path / "new" / state).is_dir()
    status, _, _ = cli(capsys, "queue", "--spool", str(tmp_path / "new"), "add", "urgent")
    assert status == EXIT_OK and (tmp_path / "new" / "incoming" / "urgent").is_dir()


def test_retry_all_failed_leaves_hopeless_kinds_out_unless_named(
    slot: Slot, capsys: pytest.CaptureFixture[str]
) -> None:
    slot.drop("inv.yaml", {"composition": "Bad", "priority": "x"})
    assert slot.run_next().error_kind == "invalid-job"
    root = str(slot.layout.root)
    status, out, err = cli(capsys, "retry", "--spool", root, "--all-failed", "--dry-run")
    assert status == EXIT_OK
    assert out.splitlines()[-1] == "would send back 1 job(s) to retry/: bad"
    assert err.startswith("left out 1 job(s) of hopeless kinds (invalid-job)")
    assert len(entries(slot.layout, "failed")) == 2  # a dry run moves nothing
    status, out, _ = cli(capsys, "retry", "--spool", root, "--kind", "invalid-job")
    assert (status, out) == (EXIT_OK, "sent back 1 job(s) to retry/: inv\n")
    assert [name.rpartition("-")[2].partition(".")[0] for name in entries(slot.layout, "retry")] == ["inv"]


def test_purge_forgets_finished_jobs_by_id_and_keeps_their_outputs(
    slot: Slot, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(slot.layout.root)
    [done] = entries(slot.layout, "done")
    status, out, _ = cli(capsys, "purge", "--spool", root, "intro", "--dry-run")
    assert (status, out.splitlines()[-1]) == (EXIT_OK, "would purge 1 job(s)")
    assert entries(slot.layout, "done") == [done]
    status, out, _ = cli(capsys, "purge", "--spool", root, "intro", "nosuch")
    assert status == EXIT_ERROR  # one of them was not there
    assert out.splitlines() == [f"done/{done}: record deleted", "nosuch: no such job", "purged 1 job(s)"]
    assert entries(slot.layout, "done") == []
    assert (slot.config.output_root / "intro.mp4").exists()


def test_python_dash_m_spoolrender_cli_is_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # What `python -m spoolrender.cli --version` runs, in this process: importing the
    # module is running the command, which ends by exiting.
    monkeypatch.setattr(sys, "argv", ["spoolrender", "--version"])
    monkeypatch.delitem(sys.modules, "spoolrender.cli.__main__", raising=False)
    with pytest.raises(SystemExit) as exited:
        importlib.import_module("spoolrender.cli.__main__")
    assert exited.value.code == EXIT_OK
    assert capsys.readouterr().out.strip() == f"spoolrender {spoolrender.__version__}"
