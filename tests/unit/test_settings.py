"""The table of settings (spoolrender.config.settings) and what is derived from it: the config's
checks and keys, `spoolrender init`'s commented spoolrender.yaml, the docs' reference."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from spoolrender import defaults
from spoolrender.config import spool_config as config
from spoolrender.config.settings import SETTINGS, config_template, settings_reference_markdown
from spoolrender.config.spool_config import CONFIG_KEYS, SpoolConfig, load_config
from spoolrender.spool.layout import init_spool

SETTING_LINE = re.compile(r"^#(?=\S)", re.MULTILINE)  # "#name: value"; prose is "# text"


def test_every_field_has_exactly_one_row_and_every_row_a_field() -> None:
    names = [s.name for s in SETTINGS]
    assert len(names) == len(set(names))
    assert sorted(names) == sorted(f.name for f in fields(SpoolConfig) if f.name != "spool")
    assert tuple(names) == CONFIG_KEYS


def test_init_writes_the_template_and_it_loads_to_the_defaults(tmp_path: Path) -> None:
    spool = init_spool(tmp_path / "spool", config_text=config_template()).root
    text = (spool / defaults.CONFIG_FILENAME).read_text(encoding="utf-8")
    assert text == config_template()
    assert load_config(spool, environ={}) == SpoolConfig(spool=spool)


def test_every_setting_line_of_the_template_uncommented_gives_the_defaults(tmp_path: Path) -> None:
    template = config_template()
    uncommented = SETTING_LINE.sub("", template)
    assert [line.split(":")[0] for line in uncommented.splitlines() if line[:1].isalpha()] == list(CONFIG_KEYS)
    (tmp_path / defaults.CONFIG_FILENAME).write_text(uncommented, encoding="utf-8")
    assert load_config(tmp_path, environ={}) == SpoolConfig(spool=tmp_path.resolve())


def test_the_examples_load_and_set_their_setting(tmp_path: Path) -> None:
    with_example = [s for s in SETTINGS if s.example is not None]
    assert {s.name for s in with_example} >= {"hooks", "commands", "command_chunks", "projects"}
    text = "\n".join(s.example for s in with_example if s.example is not None) + "\n"
    (tmp_path / defaults.CONFIG_FILENAME).write_text(text, encoding="utf-8")
    loaded = load_config(tmp_path, environ={})
    plain = SpoolConfig(spool=tmp_path.resolve())
    for s in with_example:
        assert getattr(loaded, s.name) != getattr(plain, s.name), s.name
        assert f"#   {s.name}:" in config_template()


def test_the_reference_has_one_row_per_setting() -> None:
    assert config.settings_reference_markdown is settings_reference_markdown
    lines = settings_reference_markdown().splitlines()
    assert lines[:2] == ["| setting | type | default | meaning |", "|---|---|---|---|"]
    rows = [line.split(" | ") for line in lines[2:]]
    assert sorted(row[0].removeprefix("| `").removesuffix("`") for row in rows) == sorted(CONFIG_KEYS)
    assert all(len(row) == 4 and row[3].endswith(". |") for row in rows)
    by_name = {row[0].removeprefix("| `").removesuffix("`"): row for row in rows}
    assert by_name["split_seconds"][2] == "`off`"
    assert by_name["serve_token"][2] == "unset"
    assert "[Render cache](render-cache.md)" in by_name["render_cache"][3]
