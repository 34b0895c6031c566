"""Parts of the settings people type: durations at the command line, a command's
``command_chunks:``, and what a project directory must hold before ``init`` records it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spoolrender.config.command_chunks import CommandChunks, parse_command_chunks
from spoolrender.config.durations import parse_duration
from spoolrender.errors import ConfigError, SpoolrenderError
from spoolrender.renderers.remotion.project_setup import (
    configured_project,
    detect_project,
    install_hint,
    project_problem,
    record_project,
)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("15m", 900), ("1.5h", 5400), (" 30d ", 30 * 86400), ("2w", 14 * 86400)]
)
def test_a_duration_has_a_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_bare_number_is_refused_with_the_units_it_could_mean() -> None:
    with pytest.raises(SpoolrenderError) as raised:
        parse_duration("30")
    assert (
        str(raised.value) == "duration '30' has no unit: write 30s, 30m, 30h or 30d (s, m, h, d, w: seconds to weeks)"
    )
    assert parse_duration("30", bare_seconds=True) == 30  # where the option's name says seconds
    with pytest.raises(SpoolrenderError, match=r"invalid duration '3 days': use a number and a unit, e\.g\. 90s"):
        parse_duration("3 days")
    with pytest.raises(SpoolrenderError, match="is too long"):
        parse_duration("9" * 400 + "w")


COMMANDS = {"props": ("python3", "render.py", "{output}")}
CHUNKS = {
    "span": ["python3", "span.py", "{job_file}"],
    "chunk": ["python3", "chunk.py", "{output}", "{first}", "{last}"],
    "join": ["python3", "join.py", "{parts_file}", "{output}"],
}


def test_command_chunks_need_all_three_kinds_for_a_known_command() -> None:
    parsed = parse_command_chunks({"props": CHUNKS}, COMMANDS)
    assert parsed == {"props": CommandChunks(tuple(CHUNKS["span"]), tuple(CHUNKS["chunk"]), tuple(CHUNKS["join"]))}
    assert parse_command_chunks(None, COMMANDS) == {}
    with pytest.raises(ConfigError, match=r"command_chunks\.blender: no such command in commands: \(known: props\)"):
        parse_command_chunks({"blender": CHUNKS}, COMMANDS)
    with pytest.raises(ConfigError, match=r"command_chunks\.props: missing join \(span, chunk and join are all"):
        parse_command_chunks({"props": {k: v for k, v in CHUNKS.items() if k != "join"}}, COMMANDS)
    with pytest.raises(ConfigError, match="command_chunks: expected a mapping"):
        parse_command_chunks(["props"], COMMANDS)


def test_a_placeholder_of_another_kind_is_refused() -> None:
    # {parts_file} is the join's: a chunk has no parts to list.
    wrong = {**CHUNKS, "chunk": ["python3", "chunk.py", "{parts_file}"]}
    with pytest.raises(ConfigError, match=r"command_chunks\.props\.chunk"):
        parse_command_chunks({"props": wrong}, COMMANDS)


def write_project(directory: Path, package: object) -> Path:
    directory.mkdir(parents=True)
    (directory / "package.json").write_text(json.dumps(package))
    return directory


def test_a_project_is_a_directory_whose_package_depends_on_remotion(tmp_path: Path) -> None:
    assert project_problem(tmp_path / "none") == f"{tmp_path / 'none'} is not a directory"
    (tmp_path / "empty").mkdir()
    assert (
        project_problem(tmp_path / "empty") == f"{tmp_path / 'empty'} has no package.json (a Remotion project has one)"
    )
    other = write_project(tmp_path / "other", {"dependencies": {"react": "19"}})
    assert project_problem(other) == f"{other}/package.json does not depend on remotion"
    dev = write_project(tmp_path / "dev", {"devDependencies": {"remotion": "4.0.300"}})
    assert project_problem(dev) is None
    assert install_hint(dev) == f"its packages are not installed yet: run `npm ci` (or npm install) in {dev}"
    (dev / "node_modules" / "@remotion" / "renderer").mkdir(parents=True)
    assert install_hint(dev) is None


def test_init_finds_the_project_beside_the_spool_and_records_it_relative(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    assert detect_project(spool, tmp_path / "nowhere") is None
    project = write_project(tmp_path / "remotion", {"dependencies": {"remotion": "4.0.300"}})
    assert detect_project(spool, tmp_path / "nowhere") == project.resolve()
    config = spool / "spoolrender.yaml"
    config.write_text("slots: 2  # kept\n")
    config.chmod(0o640)
    record_project(spool, project)
    assert config.read_text() == 'slots: 2  # kept\nremotion_project: "../remotion"\n'
    assert config.stat().st_mode & 0o777 == 0o640  # an operator's mode is kept
    assert configured_project(config) == '"../remotion"'
    elsewhere = write_project(tmp_path / "deep" / "video", {"dependencies": {"remotion": "4"}})
    record_project(spool, elsewhere)  # replaces the line, never adds a second one
    assert config.read_text() == f'slots: 2  # kept\nremotion_project: "{elsewhere}"\n'
