"""spoolrender.yaml as people type it (config_yaml): YAML 1.2 booleans, keys named as typed.

Every config here is text, never yaml.dump output: PyYAML's dumper quotes `'on'` and
`'no'`, so configs written by it never showed how the loader reads what a user types.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from spoolrender import defaults
from spoolrender.config.spool_config import load_config, parse_scalar
from spoolrender.config.yaml_loader import ConfigLoader
from spoolrender.errors import ConfigError

# README.md, "Completion hooks", exactly as written there (issue 25: on main this was
# "hooks.chat: unknown key(s) True").
README_HOOKS = """\
hooks:
  chat:                                   # a name: logs and delivery state use it
    on: [failed]                          # any of done, retry, failed (default: all three)
    url: https://chat.example/hooks/render
    secret_file: /etc/spoolrender/hook-secret   # optional: sign the body (HMAC-SHA256)
    timeout_seconds: 10                   # per delivery (default 10, at most 600)
    attempts: 10                          # deliveries tried before giving up (default 10)
    backoff_seconds: 10                   # first wait after a failure; doubles, capped at 15 min
  archive:
    on: [done]
    command: [/usr/local/bin/archive-video, --verbose]   # argv, never a shell string
"""


def config_from_text(spool: Path, text: str) -> Path:
    spool.mkdir(parents=True, exist_ok=True)
    path = spool / defaults.CONFIG_FILENAME
    path.write_text(text, encoding="utf-8")
    return path


def config_error(spool: Path, overrides: dict[str, Any] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(spool, overrides=overrides, environ={})
    return str(info.value)


def test_the_documented_hooks_example_loads_as_written(tmp_path: Path) -> None:
    config_from_text(tmp_path, README_HOOKS)
    hooks = load_config(tmp_path, environ={}).hooks
    assert hooks["chat"].events == ("failed",)
    assert hooks["chat"].url == "https://chat.example/hooks/render"
    assert hooks["archive"].events == ("done",)
    assert hooks["archive"].command == ("/usr/local/bin/archive-video", "--verbose")


def test_on_with_several_events_in_flow_style(tmp_path: Path) -> None:
    config_from_text(tmp_path, "hooks:\n  chat: {on: [done, failed], url: 'https://chat.example/x'}\n")
    assert load_config(tmp_path, environ={}).hooks["chat"].events == ("done", "failed")


@pytest.mark.parametrize("typed", ["On", "yes", "NO", "true", "1", "null", "~", "2026-01-01"])
def test_an_unknown_top_level_key_is_named_as_typed(tmp_path: Path, typed: str) -> None:
    path = config_from_text(tmp_path, f"slots: 2\n{typed}: 1\n")
    assert config_error(tmp_path).startswith(f"{path}: unknown setting {typed!r} (known: output_root, ")


def test_a_near_miss_in_a_hook_is_named_as_typed_with_a_suggestion(tmp_path: Path) -> None:
    config_from_text(tmp_path, "hooks:\n  chat:\n    On: [failed]\n    url: https://chat.example/x\n")
    assert config_error(tmp_path) == "hooks.chat: unknown key 'On' (did you mean 'on'?)"


def test_a_hook_named_by_a_boolean_is_named_as_typed(tmp_path: Path) -> None:
    config_from_text(tmp_path, "hooks:\n  TRUE: {url: https://chat.example/x}\n")
    assert config_error(tmp_path) == "hooks: names must be letters, digits, - and _, got 'TRUE'"


def test_a_near_miss_in_command_chunks_is_named_with_a_suggestion(tmp_path: Path) -> None:
    config_from_text(
        tmp_path, "commands: {f: [cmd, '{output}']}\ncommand_chunks:\n  f: {spam: [a], chunk: [b], join: [c]}\n"
    )
    assert config_error(tmp_path) == "command_chunks.f: unknown key 'spam' (did you mean 'span'?)"
    config_from_text(tmp_path, "commands: {f: [cmd, '{output}']}\ncommand_chunks:\n  f: {chunk: [b], join: [c]}\n")
    assert config_error(tmp_path) == "command_chunks.f: missing span (span, chunk and join are all needed)"


def test_watch_no_is_refused_as_typed(tmp_path: Path) -> None:
    config_from_text(tmp_path, "watch: no\n")
    assert config_error(tmp_path) == "watch: expected one of auto, inotify, polling, got 'no'"


def test_words_that_were_booleans_are_strings_where_a_string_is_meant(tmp_path: Path) -> None:
    config_from_text(tmp_path, "browser_executable: on\ntags: [yes, off]\nqueues: [no, '*']\n")
    cfg = load_config(tmp_path, environ={})
    assert (cfg.browser_executable, cfg.tags, cfg.queues) == ("on", ("yes", "off"), ("no", "*"))


@pytest.mark.parametrize("word", ["on", "off", "yes", "No", "OFF"])
def test_set_and_environment_values_of_boolean_words_are_strings(tmp_path: Path, word: str) -> None:
    assert parse_scalar(word) == word
    assert load_config(tmp_path, overrides={"tags": word.lower()}, environ={}).tags == (word.lower(),)
    assert load_config(tmp_path, environ={"SPOOLRENDER_BROWSER_EXECUTABLE": word}).browser_executable == word


@pytest.mark.parametrize(
    ("text", "fsync", "render_cache", "split_seconds"),
    [
        ("fsync: false\nrender_cache: true\nsplit_seconds: off\n", False, True, None),
        ("fsync: no\nrender_cache: on\nsplit_seconds: no\n", False, True, None),
        ("fsync: Off\nrender_cache: YES\nsplit_seconds: Off\n", False, True, None),
        ("fsync: True\nrender_cache: FALSE\nsplit_seconds: 90\n", True, False, 90.0),
    ],
)
def test_boolean_settings_keep_the_words_they_took(
    tmp_path: Path, text: str, fsync: bool, render_cache: bool, split_seconds: float | None
) -> None:
    config_from_text(tmp_path, text)
    cfg = load_config(tmp_path, environ={})
    assert (cfg.fsync, cfg.render_cache, cfg.split_seconds) == (fsync, render_cache, split_seconds)


def test_boolean_words_from_the_environment_and_set(tmp_path: Path) -> None:
    cfg = load_config(tmp_path, overrides={"render_cache": "yes"}, environ={"SPOOLRENDER_FSYNC": "off"})
    assert (cfg.fsync, cfg.render_cache) == (False, True)
    assert config_error(tmp_path, overrides={"fsync": "maybe"}) == "fsync: expected true or false, got 'maybe'"


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    path = config_from_text(tmp_path, "slots: 2\nlease_seconds: 30\nslots: 4\n")
    message = config_error(tmp_path)
    assert message.startswith(f"{path}: not valid YAML: duplicate key 'slots' (first at line 1)")
    assert "line 3, column 1" in message


def test_merged_keys_may_be_overridden(tmp_path: Path) -> None:
    text = "hooks:\n  a: &base {on: [failed], url: 'https://h.example/a'}\n  b:\n    <<: *base\n    on: [done]\n"
    config_from_text(tmp_path, text)
    hooks = load_config(tmp_path, environ={}).hooks
    assert (hooks["a"].events, hooks["b"].events, hooks["b"].url) == (("failed",), ("done",), "https://h.example/a")


def test_pyyaml_loaders_keep_their_own_reading() -> None:
    # The 1.2 resolvers are the config loader's own copy: job files (and anything else
    # using PyYAML's loaders) still read `on` as True.
    assert yaml.load("on: yes", Loader=yaml.CSafeLoader) == {True: True}
    assert yaml.load("on: yes", Loader=ConfigLoader) == {"on": "yes"}
    assert issubclass(ConfigLoader, yaml.CSafeLoader)  # the C parser's speed
