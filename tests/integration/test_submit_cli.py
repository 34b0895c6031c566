"""`spoolrender submit` as people use it: several files, stdin, directories, every problem
at once (the same ones the runner finds), warnings only where they apply."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.spool_jobs import command_job, entries

from spoolrender.cli import main
from spoolrender.compositions import LISTING_FILE
from spoolrender.config.spool_config import load_config
from spoolrender.renderers.remotion.bundle_cache import bundle_dir
from spoolrender.runner.loop import Runner
from spoolrender.spool.layout import SpoolLayout


def submit(spool: SpoolLayout, *args: str) -> int:
    return main(["submit", "--spool", str(spool.root), *args])


def job_file(directory: Path, name: str, job: dict[str, Any]) -> str:
    path = directory / name
    path.write_text(yaml.safe_dump(job))
    return str(path)


def test_several_files_all_or_nothing_and_a_directory_in_one_sentence(
    spool: SpoolLayout, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = job_file(tmp_path, "a.yaml", command_job())
    b = job_file(tmp_path, "b.yaml", command_job())
    bad = job_file(tmp_path, "bad.yaml", {**command_job(), "priority": "high"})
    assert submit(spool, a, str(tmp_path), bad, b) == 1
    err = capsys.readouterr().err
    assert f"cannot submit {tmp_path}: it is a directory; name its job files" in err
    assert "Traceback" not in err and "IsADirectoryError" not in err
    assert f"{bad}: job is invalid:\n  field 'priority'" in err
    assert "nothing queued: 2 of 4 files refused" in err
    assert entries(spool, "incoming") == []  # nothing queued while one file is wrong

    assert submit(spool, a, b) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [str(spool.incoming / "a.yaml"), str(spool.incoming / "b.yaml")]


def test_stdin_once_among_files_and_clashes_refused(
    spool: SpoolLayout, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a = job_file(tmp_path, "a.yaml", command_job())
    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(yaml.safe_dump({**command_job(), "id": "piped"}).encode()))
    )
    assert submit(spool, a, "-") == 0
    assert entries(spool, "incoming")[0] == "a.yaml" and len(entries(spool, "incoming")) == 2
    capsys.readouterr()
    assert submit(spool, "-", "-") == 1
    assert "give - at most once" in capsys.readouterr().err
    assert submit(spool, "--name", "x.yaml", a, a) == 1
    assert "--name names one job file" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    twin = job_file(tmp_path / "other", "c.yaml", command_job())
    same_id = job_file(tmp_path, "c2.yaml", {**command_job(), "id": "c"})
    assert submit(spool, twin, same_id) == 1
    assert "would be the same job (incoming/c2.yaml, id c)" in capsys.readouterr().err


def fake_listed_project(root: Path, cache: Path, compositions: list[dict[str, Any]]) -> Path:
    """A project with a cached composition listing, as `spoolrender compositions` leaves it.

    A fake where a real part cannot run in a fast test: the listing itself is made by
    Chromium on a real bundle (test_compositions.py does that); here it is written
    where bundle_cache looks for it, so submit's check reads it the same way.
    """
    project = root / "project"
    (project / "node_modules" / "remotion").mkdir(parents=True)
    (project / "package.json").write_text(json.dumps({"dependencies": {"remotion": "4.0.0"}}))
    (project / "node_modules" / "remotion" / "package.json").write_text(json.dumps({"version": "4.0.0"}))
    bundle = bundle_dir(project, cache)
    bundle.mkdir(parents=True)
    (bundle / "index.html").write_text("<html></html>")
    (bundle / LISTING_FILE).write_text(json.dumps(compositions))
    return project


RECAP = {
    "id": "DataRecap", "width": 640, "height": 360, "fps": 30, "durationInFrames": 90, "defaultProps": {},
    "schema": {"type": "object", "properties": {"seconds": {"type": "number", "exclusiveMinimum": 0}},
               "additionalProperties": False},
}  # fmt: skip


def test_every_problem_at_once_field_composition_props_and_id(
    spool: SpoolLayout, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = fake_listed_project(tmp_path, tmp_path / "cache", [RECAP])
    (spool.root / "spoolrender.yaml").write_text(
        yaml.safe_dump({"remotion_project": str(project), "cache_dir": str(tmp_path / "cache")})
    )
    typo = job_file(tmp_path, "typo.yaml", {"composition": "TitelCard", "props": {"x": 1}, "priorty": 3})
    recap = job_file(tmp_path, "recap.yaml", {"composition": "DataRecap", "props": {"seconds": -1},
                                              "timeout": -1, "priority": 10**6})  # fmt: skip
    assert submit(spool, typo, recap) == 1
    err = capsys.readouterr().err
    for expected in (
        "field 'priorty': unknown field",
        "field 'composition': 'TitelCard' is not a composition of the project (it has: DataRecap)",
        "field 'timeout': expected seconds > 0",
        "field 'priority': expected a whole number",
    ):
        assert expected in err, err
    # Props are checked by calling the project's own schema in its bundle, which this listed
    # fake has none of (tests/remotion/test_props_validation.py checks them with real projects).


def refused_and_failed(spool: SpoolLayout, path: str, capsys: pytest.CaptureFixture[str]) -> tuple[list[str], str]:
    """The problems submit lists for ``path``, and the reason a runner fails it for."""
    assert submit(spool, path) == 1
    listed = [line.strip() for line in capsys.readouterr().err.splitlines() if line.startswith("  ")]
    assert submit(spool, "--no-check", path) == 0
    Runner(load_config(spool.root, environ={}), drain=True).run()
    (failed,) = [name for name in entries(spool, "failed") if name.startswith(Path(path).stem + ".")]
    failure = json.loads((spool.failed / failed / "failure.json").read_text())
    assert failure["kind"] == "invalid-job"
    return listed, str(failure["reason"])


def test_submit_lists_what_the_runner_would_fail_the_job_for(
    spool: SpoolLayout, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same file, refused by submit and failed by a runner: the same problems."""
    (spool.root / "output").mkdir(exist_ok=True)
    (spool.root / "output" / "taken.mp4").write_bytes(b"x")
    many = {**command_job(), "props": ["not", "a", "mapping"], "seconds": -1, "timeout": -1, "priority": 10**6,
            "max_attempts": 0}  # fmt: skip
    listed, reason = refused_and_failed(spool, job_file(tmp_path, "many.yaml", many), capsys)
    assert len(listed) == 5 and reason.split("; ") == listed
    # The runner checks the output after the fields; submit lists it with them.
    both = {**many, "output": "taken.mp4"}
    listed, reason = refused_and_failed(spool, job_file(tmp_path, "both.yaml", both), capsys)
    assert listed[:-1] == reason.split("; ") and listed[-1].startswith("field 'output': 'taken.mp4' already exists")
    taken = job_file(tmp_path, "taken.yaml", {**command_job(), "output": "taken.mp4"})
    listed, reason = refused_and_failed(spool, taken, capsys)
    assert [reason] == listed


def test_a_remotion_project_warning_only_for_jobs_that_need_one(
    spool: SpoolLayout, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert submit(spool, job_file(tmp_path, "cmd.yaml", command_job())) == 0
    assert capsys.readouterr().err == ""  # a command job needs no Remotion project
    assert submit(spool, job_file(tmp_path, "video.yaml", {"composition": "Intro"})) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: job video is queued, but it needs a Remotion project and ")
    assert "--remotion-project DIR" in err and len(err.splitlines()) == 1
