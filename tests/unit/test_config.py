"""Spool configuration: defaults, the spool's file, SPOOLRENDER_* variables and CLI overrides."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from spoolrender import defaults
from spoolrender.config.setting_checks import COMMAND_PLACEHOLDERS
from spoolrender.config.settings import config_template
from spoolrender.config.spool_config import CONFIG_KEYS, SpoolConfig, load_config, parse_scalar
from spoolrender.errors import ConfigError
from spoolrender.spool.layout import SpoolLayout, init_spool


def write_config(root: Path, doc: dict[str, Any] | str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / defaults.CONFIG_FILENAME
    text = doc if isinstance(doc, str) else yaml.safe_dump(doc)
    path.write_text(text, encoding="utf-8")
    return path


def config_error(root: Path, *, overrides: dict[str, Any] | None = None, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(root, overrides=overrides, environ=environ or {})
    return str(info.value)


# --- defaults --------------------------------------------------------------------------


def test_defaults_without_config_file(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, environ={})
    assert cfg.spool == tmp_path.resolve()
    assert cfg.output_root == tmp_path.resolve() / defaults.OUTPUT_ROOT
    assert cfg.settle_seconds == defaults.SETTLE_S
    assert cfg.heartbeat_seconds == defaults.HEARTBEAT_INTERVAL_S
    assert cfg.lease_seconds == defaults.LEASE_S
    assert cfg.rescan_seconds == defaults.RESCAN_INTERVAL_S
    assert cfg.poll_seconds == defaults.POLL_INTERVAL_S
    assert cfg.backoff_base_seconds == defaults.BACKOFF_BASE_S
    assert cfg.backoff_cap_seconds == defaults.BACKOFF_CAP_S
    assert cfg.grace_seconds == defaults.GRACE_S
    assert cfg.max_attempts == defaults.DEFAULT_MAX_ATTEMPTS
    assert cfg.timeout_seconds == defaults.DEFAULT_TIMEOUT_S
    assert cfg.max_job_bytes == defaults.MAX_JOB_BYTES
    assert cfg.slots is None
    assert cfg.threads_per_job == defaults.THREADS_PER_JOB
    assert cfg.memory_per_job_mb == defaults.MEMORY_PER_JOB_MB
    assert cfg.watch == "auto"
    assert cfg.commands == {}
    # Relative like output_root: resolved against the spool, whatever the working directory.
    assert cfg.remotion_project == tmp_path.resolve() / defaults.REMOTION_PROJECT
    assert cfg.browser_executable == defaults.BROWSER_EXECUTABLE
    assert cfg.cache_dir == Path(os.path.expanduser("~/.cache/spoolrender"))


def test_fresh_spool_commented_config_gives_defaults(tmp_path: Path) -> None:
    # `spoolrender init`'s file (init_spool writes the text its caller gives: the CLI's is this).
    layout = init_spool(tmp_path / "fresh", config_text=config_template())
    assert (layout.root / defaults.CONFIG_FILENAME).read_text(encoding="utf-8") == config_template()
    assert load_config(layout.root, environ={}) == load_config(tmp_path / "fresh", environ={})
    assert load_config(layout.root, environ={}).lease_seconds == defaults.LEASE_S


def test_empty_config_file_gives_defaults(tmp_path: Path) -> None:
    write_config(tmp_path, "")
    assert load_config(tmp_path, environ={}).max_attempts == defaults.DEFAULT_MAX_ATTEMPTS


def test_config_keys_cover_every_field() -> None:
    assert "spool" not in CONFIG_KEYS
    assert set(CONFIG_KEYS) == {f for f in SpoolConfig.__dataclass_fields__ if f != "spool"}


# --- file values -----------------------------------------------------------------------


def test_file_values(tmp_path: Path) -> None:
    write_config(
        tmp_path,
        {
            "settle_seconds": 0,
            "heartbeat_seconds": 2,
            "lease_seconds": 30,
            "max_attempts": 5,
            "timeout_seconds": 90.5,
            "slots": 3,
            "watch": "polling",
            "max_job_bytes": 4096,
            "commands": {"slate": ["ffmpeg", "-y", 2, 1.5, "{output}"]},
            "browser_executable": "/opt/chrome",
        },
    )
    cfg = load_config(tmp_path, environ={})
    assert cfg.settle_seconds == 0.0
    assert cfg.heartbeat_seconds == 2.0
    assert isinstance(cfg.heartbeat_seconds, float)
    assert cfg.lease_seconds == 30.0
    assert cfg.max_attempts == 5
    assert cfg.timeout_seconds == 90.5
    assert cfg.slots == 3
    assert cfg.watch == "polling"
    assert cfg.max_job_bytes == 4096
    assert cfg.commands == {"slate": ("ffmpeg", "-y", "2", "1.5", "{output}")}
    assert cfg.browser_executable == "/opt/chrome"


def test_conftest_spool_config_is_loaded(spool: SpoolLayout, config: SpoolConfig) -> None:
    assert config.spool == spool.root
    assert config.lease_seconds == 2.0
    assert config.slots == 2
    assert set(config.commands) == {"props"}


def test_slots_auto_in_file(tmp_path: Path) -> None:
    write_config(tmp_path, "slots: auto\n")
    assert load_config(tmp_path, environ={}).slots is None


def test_null_commands_means_none(tmp_path: Path) -> None:
    write_config(tmp_path, "commands: null\n")
    assert load_config(tmp_path, environ={}).commands == {}


# --- environment and CLI overrides -----------------------------------------------------


def test_env_overrides_file(tmp_path: Path) -> None:
    write_config(tmp_path, {"slots": 2, "watch": "inotify", "max_attempts": 4})
    cfg = load_config(
        tmp_path,
        environ={
            "SPOOLRENDER_SLOTS": "5",
            "SPOOLRENDER_WATCH": "polling",
            "SPOOLRENDER_LEASE_SECONDS": "90.5",
        },
    )
    assert cfg.slots == 5
    assert cfg.watch == "polling"
    assert cfg.lease_seconds == 90.5
    assert cfg.max_attempts == 4  # from the file, not overridden


def test_env_auto_slots(tmp_path: Path) -> None:
    write_config(tmp_path, {"slots": 2})
    assert load_config(tmp_path, environ={"SPOOLRENDER_SLOTS": "auto"}).slots is None


def test_cli_overrides_beat_env_and_file(tmp_path: Path) -> None:
    write_config(tmp_path, {"slots": 2, "max_attempts": 4})
    cfg = load_config(
        tmp_path,
        overrides={"slots": "6", "max_attempts": 9},
        environ={"SPOOLRENDER_SLOTS": "5", "SPOOLRENDER_MAX_ATTEMPTS": "7"},
    )
    assert cfg.slots == 6
    assert cfg.max_attempts == 9


def test_environ_argument_replaces_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOOLRENDER_SLOTS", "7")
    assert load_config(tmp_path, environ={}).slots is None
    assert load_config(tmp_path).slots == 7


def test_unrelated_env_variables_ignored(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, environ={"SPOOLRENDER_NOT_A_SETTING": "x", "SLOTS": "9", "spoolrender_slots": "9"})
    assert cfg.slots is None


@pytest.mark.parametrize(
    ("key", "text", "expected"),
    [
        ("max_attempts", "5", 5),
        ("heartbeat_seconds", "2.5", 2.5),
        ("lease_seconds", "60", 60.0),
        ("slots", "auto", None),
        ("slots", "null", None),
        ("watch", "inotify", "inotify"),
        ("browser_executable", "/usr/bin/chromium-browser", "/usr/bin/chromium-browser"),
        ("browser_executable", "[a, b", "[a, b"),  # not valid YAML: kept as text
        ("commands", "{x: [echo, '{output}']}", {"x": ("echo", "{output}")}),
    ],
)
def test_values_parsed_as_yaml_scalars(tmp_path: Path, key: str, text: str, expected: Any) -> None:
    via_env = load_config(tmp_path, environ={"SPOOLRENDER_" + key.upper(): text})
    via_cli = load_config(tmp_path, overrides={key: text}, environ={})
    assert getattr(via_env, key) == expected
    assert getattr(via_cli, key) == expected


def test_parse_scalar() -> None:
    assert parse_scalar("5") == 5
    assert parse_scalar("2.5") == 2.5
    assert parse_scalar("auto") == "auto"
    assert parse_scalar("[a, b]") == ["a", "b"]
    assert parse_scalar("") is None
    assert parse_scalar("{unclosed") == "{unclosed"


def test_empty_string_override_reads_as_null(tmp_path: Path) -> None:
    assert config_error(tmp_path, overrides={"output_root": ""}) == "output_root: expected a path, got None"
    message = config_error(tmp_path, environ={"SPOOLRENDER_BROWSER_EXECUTABLE": ""})
    assert message == (
        "browser_executable: expected a non-empty string, got None"
        " (set by the environment variable SPOOLRENDER_BROWSER_EXECUTABLE)"
    )


def test_non_string_overrides_are_used_as_given(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, overrides={"slots": 3, "commands": {"c": ["echo", "{job_id}"]}}, environ={})
    assert cfg.slots == 3
    assert cfg.commands == {"c": ("echo", "{job_id}")}


# --- paths -----------------------------------------------------------------------------


def test_relative_output_root_resolved_against_spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = tmp_path / "spool"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    write_config(spool, {"output_root": "renders/final"})
    assert load_config(spool, environ={}).output_root == spool.resolve() / "renders" / "final"
    env_cfg = load_config(spool, environ={"SPOOLRENDER_OUTPUT_ROOT": "from-env"})
    assert env_cfg.output_root == spool.resolve() / "from-env"


def test_relative_spool_path_is_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "s").mkdir()
    monkeypatch.chdir(tmp_path)
    cfg = load_config(Path("s"), environ={})
    assert cfg.spool == tmp_path.resolve() / "s"
    assert cfg.output_root == tmp_path.resolve() / "s" / "output"


def test_relative_remotion_project_resolved_against_spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(tmp_path / "spool", overrides={"remotion_project": "proj"}, environ={})
    assert cfg.remotion_project == tmp_path.resolve() / "spool" / "proj"


def test_absolute_output_root_kept(tmp_path: Path) -> None:
    target = tmp_path / "abs-out"
    write_config(tmp_path / "spool", {"output_root": str(target)})
    assert load_config(tmp_path / "spool", environ={}).output_root == target


def test_home_in_output_root_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cfg = load_config(tmp_path, overrides={"output_root": "~/videos"}, environ={})
    assert cfg.output_root == tmp_path / "home" / "videos"


# --- unknown keys ----------------------------------------------------------------------


def test_unknown_key_in_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, {"slots": 2, "slot": 3})
    assert config_error(tmp_path) == f"{path}: unknown setting 'slot' (did you mean 'slots'?)"


def test_every_unknown_key_is_named_with_the_known_ones_when_one_has_no_near_miss(tmp_path: Path) -> None:
    path = write_config(tmp_path, "slot: 3\nzzz: 1\n")
    message = config_error(tmp_path)
    assert message.startswith(f"{path}: unknown settings 'slot' (did you mean 'slots'?), 'zzz' (known: output_root, ")


def test_unknown_key_in_overrides(tmp_path: Path) -> None:
    message = config_error(tmp_path, overrides={"lease": "10"})
    assert message == "unknown setting 'lease' (did you mean 'lease_seconds'?)"
    message = config_error(tmp_path, overrides={"zzz": "10"})
    assert message.startswith("unknown setting 'zzz' (known: output_root, watch, settle_seconds")


def test_spool_is_not_a_setting(tmp_path: Path) -> None:
    assert "unknown setting 'spool'" in config_error(tmp_path, overrides={"spool": "/x"})
    write_config(tmp_path, {"spool": "/x"})
    assert "unknown setting 'spool'" in config_error(tmp_path)


# --- invalid values --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "want"),
    [
        ("heartbeat_seconds", -1, "heartbeat_seconds: expected a number > 0, got -1"),
        ("heartbeat_seconds", 0, "heartbeat_seconds: expected a number > 0, got 0"),
        ("lease_seconds", "abc", "lease_seconds: expected a number, got str 'abc'"),
        ("lease_seconds", True, "lease_seconds: expected a number, got bool True"),
        ("timeout_seconds", float("inf"), "timeout_seconds: expected a number, got float inf"),
        ("timeout_seconds", float("nan"), "timeout_seconds: expected a number, got float nan"),
        ("settle_seconds", -0.5, "settle_seconds: expected a number > 0, got -0.5"),
        ("grace_seconds", "soon", "grace_seconds: expected a number, got str 'soon'"),
        ("max_attempts", 0, "max_attempts: expected a whole number >= 1, got 0"),
        ("max_attempts", -3, "max_attempts: expected a whole number >= 1, got -3"),
        ("max_attempts", 2.5, "max_attempts: expected a whole number >= 1, got 2.5"),
        ("max_attempts", True, "max_attempts: expected a whole number >= 1, got True"),
        ("max_attempts", "three", "max_attempts: expected a whole number >= 1, got 'three'"),
        ("max_job_bytes", 0, "max_job_bytes: expected a whole number >= 1, got 0"),
        ("slots", 0, "slots: expected a whole number >= 1, got 0"),
        ("slots", "many", "slots: expected a whole number >= 1, got 'many'"),
        ("slots", True, "slots: expected a whole number >= 1, got True"),
        ("threads_per_job", 0, "threads_per_job: expected a whole number >= 1, got 0"),
        ("slots_per_core", 0, "slots_per_core: expected a number > 0, got 0"),
        ("slots_per_core", "lots", "slots_per_core: expected a number, got str 'lots'"),
        ("memory_per_job_mb", -1024, "memory_per_job_mb: expected a whole number >= 1, got -1024"),
        ("watch", "fast", "watch: expected one of auto, inotify, polling, got 'fast'"),
        ("browser_executable", "", "browser_executable: expected a non-empty string, got ''"),
        ("browser_executable", 5, "browser_executable: expected a non-empty string, got 5"),
        ("output_root", "", "output_root: expected a path, got ''"),
        ("output_root", 5, "output_root: expected a path, got 5"),
        ("cache_dir", ["a"], "cache_dir: expected a path, got ['a']"),
        # A share has its own message: no "seconds" hint, and 0 is allowed.
        ("host_block_max_share", "2m", "host_block_max_share: expected a share from 0 to 1 (0.5: half), got str '2m'"),
        ("host_block_max_share", -0.5, "host_block_max_share: expected a share from 0 to 1 (0.5: half), got -0.5"),
        ("host_block_max_share", 1.5, "host_block_max_share: expected a share from 0 to 1 (0.5: half), got 1.5"),
        ("host_block_max_share", True, "host_block_max_share: expected a share from 0 to 1 (0.5: half), got bool True"),
    ],
)
def test_invalid_values(tmp_path: Path, key: str, value: Any, want: str) -> None:
    if value != "":  # an empty CLI/env string reads as YAML null, tested below
        assert config_error(tmp_path, overrides={key: value}) == want
    write_config(tmp_path, {key: value})
    assert config_error(tmp_path) == want


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("heartbeat_seconds", "-1"),
        ("heartbeat_seconds", "0"),
        ("lease_seconds", "abc"),
        ("max_attempts", "0"),
        ("max_attempts", "2.5"),
        ("slots", "0"),
        ("watch", "fast"),
    ],
)
def test_invalid_env_values(tmp_path: Path, key: str, text: str) -> None:
    message = config_error(tmp_path, environ={"SPOOLRENDER_" + key.upper(): text})
    assert message.startswith(f"{key}: expected ")


@pytest.mark.parametrize(
    ("key", "value"),
    [("settle_seconds", 0), ("backoff_base_seconds", 0), ("grace_seconds", 0), ("host_block_max_share", 0)],
)
def test_zero_allowed_where_non_negative(tmp_path: Path, key: str, value: int) -> None:
    cfg = load_config(tmp_path, overrides={key: value}, environ={})
    assert getattr(cfg, key) == 0.0


def test_backoff_cap_below_base_refused(tmp_path: Path) -> None:
    message = config_error(tmp_path, overrides={"backoff_base_seconds": 10, "backoff_cap_seconds": 5})
    assert message == "backoff_cap_seconds must be >= backoff_base_seconds"


def test_lease_below_twice_heartbeat_refused(tmp_path: Path) -> None:
    message = config_error(tmp_path, overrides={"heartbeat_seconds": 5, "lease_seconds": 9.9})
    assert message == ("lease_seconds (9.9) must be at least twice heartbeat_seconds (5), or live jobs look dead")


def test_lease_exactly_twice_heartbeat_accepted(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, overrides={"heartbeat_seconds": 5, "lease_seconds": 10}, environ={})
    assert cfg.lease_seconds == 10.0


def test_lease_check_uses_merged_values(tmp_path: Path) -> None:
    write_config(tmp_path, {"heartbeat_seconds": 1, "lease_seconds": 3})
    message = config_error(tmp_path, environ={"SPOOLRENDER_HEARTBEAT_SECONDS": "2"})
    assert message.startswith("lease_seconds (3) must be at least twice heartbeat_seconds (2)")


# --- commands --------------------------------------------------------------------------


def test_commands_with_every_known_placeholder(tmp_path: Path) -> None:
    argv = ["render", *("{" + p + "}" for p in COMMAND_PLACEHOLDERS), "--out={output}"]
    cfg = load_config(tmp_path, overrides={"commands": {"all": argv}}, environ={})
    assert cfg.commands == {"all": tuple(argv)}


def test_commands_shell_string_refused(tmp_path: Path) -> None:
    message = config_error(tmp_path, overrides={"commands": {"slate": "ffmpeg -i x {output}"}})
    assert message.startswith("commands.slate: expected a non-empty list of argv strings (not a shell string)")
    assert "'ffmpeg -i x {output}'" in message


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([], id="empty"),
        pytest.param(["echo", True], id="bool"),
        pytest.param(["echo", None], id="none"),
        pytest.param(["echo", ["nested"]], id="nested"),
        pytest.param({"a": "b"}, id="mapping"),
    ],
)
def test_commands_bad_argv_refused(tmp_path: Path, argv: Any) -> None:
    message = config_error(tmp_path, overrides={"commands": {"c": argv}})
    assert message.startswith("commands.c: expected a non-empty list of argv strings")


def test_commands_unknown_placeholder_refused_with_known_list(tmp_path: Path) -> None:
    message = config_error(tmp_path, overrides={"commands": {"slate": ["ffmpeg", "{outfile}"]}})
    assert message == (
        "commands.slate: unknown placeholder {outfile} "
        "(known: {output}, {job_file}, {props_file}, {work_dir}, {threads}, {job_id}, {attempt})"
    )


@pytest.mark.parametrize("arg", ["{}", "{Output}", "{output:>10}", "{0}", "x{props}y"])
def test_commands_odd_placeholders_refused(tmp_path: Path, arg: str) -> None:
    message = config_error(tmp_path, overrides={"commands": {"c": ["echo", arg]}})
    assert message.startswith("commands.c: unknown placeholder {")
    assert "(known: {output}" in message


@pytest.mark.parametrize(
    "value",
    [pytest.param(["ffmpeg", "{output}"], id="list"), pytest.param("ffmpeg {output}", id="string")],
)
def test_commands_not_a_mapping_refused(tmp_path: Path, value: Any) -> None:
    message = config_error(tmp_path, overrides={"commands": value})
    assert message.startswith("commands: expected a mapping of name: [argv...], got ")


def test_commands_empty_name_refused(tmp_path: Path) -> None:
    write_config(tmp_path, 'commands: {"": [echo]}\n')
    assert config_error(tmp_path) == "commands: command names must be non-empty strings, got ''"


def test_commands_non_string_name_refused(tmp_path: Path) -> None:
    write_config(tmp_path, "commands: {5: [echo]}\n")
    assert config_error(tmp_path) == "commands: command names must be non-empty strings, got 5"


# --- broken config files ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("- a\n- b\n", "expected a mapping of settings, got list", id="list"),
        pytest.param("just text\n", "expected a mapping of settings, got str", id="scalar"),
        pytest.param("42\n", "expected a mapping of settings, got int", id="int"),
    ],
)
def test_config_file_not_a_mapping(tmp_path: Path, text: str, want: str) -> None:
    path = write_config(tmp_path, text)
    assert config_error(tmp_path) == f"{path}: {want}"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("slots: [1, 2\n", id="unclosed"),
        pytest.param("a: b: c\n", id="mapping-in-scalar"),
        pytest.param("a: 1\n---\nb: 2\n", id="two-documents"),
        pytest.param("a: !!python/object/apply:os.system [echo]\n", id="python-tag"),
    ],
)
def test_config_file_not_yaml(tmp_path: Path, text: str) -> None:
    path = write_config(tmp_path, text)
    assert config_error(tmp_path).startswith(f"{path}: not valid YAML: ")


def test_config_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / defaults.CONFIG_FILENAME
    path.write_bytes(b"slots: \xff\xfe\n")
    assert config_error(tmp_path).startswith(f"{path}: cannot read: ")


def test_config_file_is_a_directory(tmp_path: Path) -> None:
    path = tmp_path / defaults.CONFIG_FILENAME
    path.mkdir()
    assert config_error(tmp_path).startswith(f"{path}: cannot read: ")


# --- values the YAML loader cannot construct ---------------------------------------------


def test_config_file_with_impossible_date_is_config_error(tmp_path: Path) -> None:
    path = write_config(tmp_path, "output_root: 2026-13-45\n")
    assert config_error(tmp_path).startswith(f"{path}: ")


def test_env_value_that_is_no_valid_yaml_value_is_read_as_text(tmp_path: Path) -> None:
    # "2026-13-45" looks like a YAML date but is none: it is kept as the text it is.
    config = load_config(tmp_path, environ={"SPOOLRENDER_OUTPUT_ROOT": "2026-13-45"})
    assert config.output_root == tmp_path.resolve() / "2026-13-45"


def test_huge_integer_is_config_error(tmp_path: Path) -> None:
    message = config_error(tmp_path, environ={"SPOOLRENDER_LEASE_SECONDS": "1" + "0" * 400})
    assert message.startswith("lease_seconds: ")
