"""Where serve's write token may come from: a file only its owner can read, or the spool's
config when nobody else can read that; and how a request's Authorization header is read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spoolrender.errors import ConfigError
from spoolrender.serve.auth import bearer_matches, load_serve_token
from spoolrender.testing import make_spool

TOKEN = "a-token-long-enough-1234"


def test_a_token_file_others_can_read_is_refused_with_the_fix(tmp_path: Path) -> None:
    token_file = tmp_path / "serve-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o644)
    config = make_spool(tmp_path / "spool", {"serve_token_file": str(token_file)})
    with pytest.raises(ConfigError) as refused:
        load_serve_token(config)
    assert str(refused.value) == (
        f"serve_token_file {token_file} is open to other users (mode 0644): anyone who can read or change it "
        f"controls the spool; `chmod 600 {token_file}`, or give it a group of its own that has no other members"
    )
    token_file.chmod(0o600)
    assert load_serve_token(config) == TOKEN


def test_a_token_in_a_config_others_can_read_is_refused(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool", {"serve_token": TOKEN})
    config_file = config.spool / "spoolrender.yaml"
    os.chmod(config_file, 0o644)
    with pytest.raises(ConfigError, match=r"holds serve_token but other users can read it \(mode 0644\)"):
        load_serve_token(config)
    os.chmod(config_file, 0o600)
    assert load_serve_token(config) == TOKEN
    assert load_serve_token(make_spool(tmp_path / "readonly")) is None  # no token: writes are off


def test_only_a_bearer_header_carries_a_token() -> None:
    assert bearer_matches("Bearer secret", "secret") is True
    assert bearer_matches("bearer   secret  ", "secret") is True
    assert bearer_matches("Bearer guess", "secret") is False
    assert bearer_matches("Basic c2VjcmV0", "secret") is None
    assert bearer_matches("Bearer ", "secret") is None
    assert bearer_matches(None, "secret") is None
