"""Durations typed at the command line: the unit is required unless the name says seconds."""

from __future__ import annotations

import os
import time

import pytest

from spoolrender.cli import build_parser, main
from spoolrender.spool.layout import SpoolLayout


def old_done_entry(spool: SpoolLayout, name: str, age_seconds: float) -> None:
    (spool.done / name).mkdir()
    then = time.time() - age_seconds
    os.utime(spool.done / name, (then, then))


def test_purge_refuses_a_bare_number_and_takes_units(spool: SpoolLayout, capsys: pytest.CaptureFixture[str]) -> None:
    old_done_entry(spool, "hour-old.0001", 3600)
    root = ["--spool", str(spool.root)]
    with pytest.raises(SystemExit) as exit_info:
        main(["purge", "--older-than", "30", "--dry-run", *root])  # 30 s or 30 days? Refused.
    assert exit_info.value.code == 2
    assert "'30' has no unit: write 30s, 30m, 30h or 30d" in capsys.readouterr().err
    assert main(["purge", "--older-than", "30d", "--dry-run", *root]) == 0
    assert "would purge 0 job(s)" in capsys.readouterr().out
    assert main(["purge", "--older-than", "30m", "--dry-run", *root]) == 0
    assert "would purge 1 job(s)" in capsys.readouterr().out
    assert (spool.done / "hour-old.0001").is_dir()


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["run", "--max-runtime", "30"], "'30' has no unit"),
        (["run", "--max-runtime", "0m"], "expected a duration > 0"),
        (["purge", "--cache", "--older-than", "7"], "'7' has no unit"),
        (["status", "--watch", "0"], "at least 0.1 s"),
        (["status", "--watch", "-1"], "a number of seconds (2, 0.5) or a number and a unit"),
        (["status", "--watch", "0.05"], "at least 0.1 s"),
        (["serve", "--poll", "nan"], "invalid duration 'nan'"),
    ],
)
def test_every_duration_flag_checks_its_value(argv: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert error in capsys.readouterr().err


def test_seconds_flags_take_bare_seconds_or_a_unit() -> None:
    parser = build_parser()
    assert parser.parse_args(["status", "--watch", "2"]).watch == 2.0
    assert parser.parse_args(["status", "--watch"]).watch == 2.0
    assert parser.parse_args(["status", "--watch", "1m"]).watch == 60.0
    args = parser.parse_args(["serve", "--poll", "0.5", "--keepalive", "1m", "--history-interval", "2m"])
    assert (args.poll, args.keepalive, args.history_interval) == (0.5, 60.0, 120.0)
    assert parser.parse_args(["run", "--max-runtime", "50m"]).max_runtime == 3000.0
    assert parser.parse_args(["purge", "--older-than", "2w"]).older_than == 14 * 86400.0


def test_a_seconds_setting_given_a_unit_says_it_takes_seconds(
    spool: SpoolLayout, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--spool", str(spool.root), "--set", "lease_seconds=2m"]) == 1
    assert "lease_seconds: expected a number of seconds, without a unit" in capsys.readouterr().err
