"""A spool's config from its file, the environment and the command line, in that order of
precedence, and the reasons a wrong setting is refused with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spoolrender.config.spool_config import load_config
from spoolrender.errors import ConfigError
from spoolrender.testing import make_spool


def test_the_environment_overrides_the_file_and_the_command_line_both(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool", {"slots": 2, "output_root": "videos"})
    assert (config.slots, config.output_root) == (2, config.spool / "videos")  # relative to the spool
    assert load_config(config.spool, environ={"SPOOLRENDER_SLOTS": "3"}).slots == 3
    assert load_config(config.spool, environ={"SPOOLRENDER_SLOTS": "3"}, overrides={"slots": "4"}).slots == 4
    assert load_config(config.spool, environ={"UNRELATED": "1"}).slots == 2


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({"slotz": 2}, "unknown setting 'slotz' (did you mean 'slots'?)"),
        ({"slots": "many"}, "slots: expected a whole number >= 1, got 'many'"),
        ({"settle_seconds": -1}, "settle_seconds: expected a number > 0, got -1"),
        (
            {"lease_seconds": 0.1, "heartbeat_seconds": 1},
            "lease_seconds (0.1) must be at least twice heartbeat_seconds (1), or live jobs look dead",
        ),
    ],
)
def test_a_wrong_setting_is_refused_with_its_reason(tmp_path: Path, settings: dict[str, Any], reason: str) -> None:
    with pytest.raises(ConfigError) as refused:
        make_spool(tmp_path / "spool", settings)
    assert str(refused.value).endswith(reason)


def test_a_wrong_value_from_the_environment_is_refused_too(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool")
    named = r"\(set by the environment variable SPOOLRENDER_SLOTS\)$"
    with pytest.raises(ConfigError, match=r"^slots: expected a whole number >= 1, got 'zero' " + named):
        load_config(config.spool, environ={"SPOOLRENDER_SLOTS": "zero"})
    with pytest.raises(ConfigError, match=r"^slots: expected a whole number >= 1, got 0$"):  # overridden: its key
        load_config(config.spool, overrides={"slots": "0"}, environ={"SPOOLRENDER_SLOTS": "zero"})


def test_settings_refused_together_name_the_environment_variable_that_set_one(tmp_path: Path) -> None:
    """A check of two settings at once ("cap >= base") names the variable too: its message
    does not start with "key:", and the variable went unnamed."""
    config = make_spool(tmp_path / "spool", {"heartbeat_seconds": 1})
    cap = r"\(set by the environment variable SPOOLRENDER_BACKOFF_CAP_SECONDS\)$"
    with pytest.raises(ConfigError, match=r"^backoff_cap_seconds must be >= backoff_base_seconds " + cap):
        load_config(config.spool, environ={"SPOOLRENDER_BACKOFF_CAP_SECONDS": "1"})
    lease = r"or live jobs look dead \(set by the environment variable SPOOLRENDER_LEASE_SECONDS\)$"
    with pytest.raises(
        ConfigError, match=r"^lease_seconds \(0.1\) must be at least twice heartbeat_seconds \(1\), " + lease
    ):
        load_config(config.spool, environ={"SPOOLRENDER_LEASE_SECONDS": "0.1"})
    with pytest.raises(ConfigError, match=r"look dead$"):  # both from the file: no variable to name
        make_spool(tmp_path / "other", {"heartbeat_seconds": 1, "lease_seconds": 0.1})
