"""`projects:` in spoolrender.yaml and a job's `project:` field (no Remotion needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.processes import spoolrender_cmd
from support.spool_jobs import write_spool_config

from spoolrender.config.spool_config import SpoolConfig, load_config
from spoolrender.errors import ConfigError, JobInvalid
from spoolrender.jobfile import parse_job
from spoolrender.spool.layout import SpoolLayout


def cfg(spool: Path, **settings: Any) -> SpoolConfig:
    """A config built as load_config builds it: from the file's raw values."""
    return SpoolConfig(spool=spool, **settings)


def test_projects_are_named_directories_relative_to_the_spool(tmp_path: Path) -> None:
    config = cfg(tmp_path, projects={"promo": "../promo", "abs.1": "/srv/video"}, warm_projects=3)
    assert config.projects == {"promo": tmp_path / "../promo", "abs.1": Path("/srv/video")}
    assert config.project_dir(None) == tmp_path / "../remotion"  # remotion_project stays the default
    assert config.project_dir("promo") == tmp_path / "../promo"
    with pytest.raises(ConfigError, match=r"unknown project 'other' \(projects in spoolrender.yaml: abs.1, promo\)"):
        config.project_dir("other")


@pytest.mark.parametrize(
    ("projects", "message"),
    [
        (["a"], "expected a mapping of project name: directory"),
        ({"": "/x"}, "project names are 1-64 letters"),
        ({"../x": "/x"}, "project names are 1-64 letters"),
        ({"a": 3}, "projects.a"),
    ],
)
def test_bad_projects_maps_are_config_errors(tmp_path: Path, projects: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cfg(tmp_path, projects=projects)


def test_warm_projects_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="warm_projects"):
        cfg(tmp_path, warm_projects=0)


def job(**fields: object) -> bytes:
    return yaml.safe_dump({"composition": "Intro", **fields}).encode()


def test_the_project_field_names_a_configured_project(tmp_path: Path) -> None:
    config = cfg(tmp_path, projects={"promo": "/srv/promo"})
    assert parse_job(job(project="promo"), "a.yaml", config).project == "promo"
    assert parse_job(job(), "a.yaml", config).project is None
    with pytest.raises(JobInvalid) as caught:
        parse_job(job(project="promos"), "a.yaml", config)
    assert caught.value.problems == [
        "field 'project': expected one of the spool config's projects (promo), got str 'promos'"
    ]
    with pytest.raises(JobInvalid) as caught:
        parse_job(job(project="promo"), "a.yaml", cfg(tmp_path))
    assert "none: spoolrender.yaml has no projects" in caught.value.problems[0]
    command = yaml.safe_dump({"renderer": "command", "command": "x", "project": "promo"}).encode()
    with pytest.raises(JobInvalid) as caught:
        parse_job(command, "a.yaml", cfg(tmp_path, projects={"promo": "/p"}, commands={"x": ["true"]}))
    assert caught.value.problems == ["field 'project': only for renderer: remotion"]


def test_submit_refuses_an_unknown_project_and_compositions_names_it(spool: SpoolLayout, tmp_path: Path) -> None:
    write_spool_config(spool, {"projects": {"promo": str(tmp_path / "promo")}})
    proc = subprocess.run(
        spoolrender_cmd("submit", "-", "--name", "x.yaml", "--spool", str(spool.root)),
        input=job(project="other"), capture_output=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert b"field 'project': expected one of the spool config's projects (promo)" in proc.stderr
    listing = subprocess.run(
        spoolrender_cmd("compositions", "--project", "other", "--spool", str(spool.root)),
        capture_output=True, check=False,
    )  # fmt: skip
    assert listing.returncode == 1
    assert b"unknown project 'other' (projects in spoolrender.yaml: promo)" in listing.stderr
    missing = subprocess.run(
        spoolrender_cmd("compositions", "--project", "promo", "--spool", str(spool.root)),
        capture_output=True, check=False,
    )  # fmt: skip
    assert missing.returncode == 1
    assert f"the Remotion project {tmp_path / 'promo'} does not exist".encode() in missing.stderr
    assert load_config(spool.root, environ={}).projects == {"promo": tmp_path / "promo"}
