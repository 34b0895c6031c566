"""RunError: the run records' ``error``, built in one place, the same JSON as ever on disk.

tests/data/run_records.json holds real records of every error shape, written by the code
before RunError replaced the hand-built dicts (tests/support/run_records_corpus.py made it
then): each reads back and writes out again byte for byte, and today's code writes the
same records for the same cases.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.run_records_corpus import corpus

from spoolrender.core.run_error import UNREADABLE_CHUNK_ERROR, RunError
from spoolrender.core.vocabulary import FailureKind
from spoolrender.spool.durable import json_bytes
from spoolrender.spool.records import RunRecord

CORPUS = Path(__file__).parents[1] / "data" / "run_records.json"


def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(CORPUS.read_text(encoding="utf-8"))
    return data


def errors_in(records: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ``error`` object of the corpus: of run records, and of the runs failure.json and
    result.json quote."""
    found = []
    for name, record in records.items():
        runs = [record] if "/run-" in name else record["runs"]
        found += [run["error"] for run in runs if run["error"] is not None]
    return found


def test_the_corpus_holds_every_error_shape_the_code_writes() -> None:
    kinds = {error["kind"] for error in errors_in(recorded())}
    # The runner's (renderers' kinds, timeout, refusals, a split refused), cancel's, the
    # recoverer's, a failed publish's.
    assert kinds == {
        "invalid-props", "worker-died", "browser-crashed", "timeout", "invalid-job", "cancelled",
        "runner-died", "spool-io", "claim-abandoned", "publish",
        "render-farm-quota",  # a renderer's own kind, passed through
    }  # fmt: skip
    messages = [e["message"] for e in errors_in(recorded())]
    assert any(m.endswith("(attempt 1 of 1, none left)") for m in messages)  # the executor's last attempt
    assert any(m.endswith("no attempts left (1 of 1)") for m in messages)  # the recoverer's
    assert any(m.startswith("this job cannot be rendered in chunks") for m in messages)  # chunks/runs


def test_every_recorded_error_round_trips_byte_for_byte() -> None:
    errors = errors_in(recorded())
    assert len(errors) >= 20
    for error in errors:
        again = RunError.from_record(error).to_record()
        assert json_bytes(again) == json_bytes(error)
        assert json.dumps(again) == json.dumps(error)  # the same keys in the same order, unsorted too


def test_every_recorded_run_file_round_trips_byte_for_byte() -> None:
    run_files = {name: r for name, r in recorded().items() if "/run-" in name}
    assert len(run_files) >= 15
    for name, record in run_files.items():
        # A run file is RunRecord.to_json's bytes: read back and written again, the same bytes.
        on_disk = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
        again = RunRecord.from_dict(json.loads(on_disk))
        assert again.to_json() == on_disk, name
        if record["error"] is not None:
            rebuilt = RunError.from_record(again.error).to_record()
            assert RunRecord.from_dict({**record, "error": rebuilt}).to_json() == on_disk, name


def test_todays_code_writes_the_records_the_code_before_run_error_wrote(tmp_path: Path) -> None:
    assert corpus(tmp_path) == recorded()


def test_keys_a_newer_version_adds_are_kept_as_read() -> None:
    raw = {"kind": "render-farm", "message": "x", "transient": True, "detail": "the stack", "code": 7}
    error = RunError.from_record(raw)
    assert (error.kind, error.message, error.transient, dict(error.extra)) == (
        "render-farm", "x", True, {"detail": "the stack", "code": 7},
    )  # fmt: skip
    assert json.dumps(error.to_record()) == json.dumps(raw)
    assert error.with_message("y").to_record() == {**raw, "message": "y"}


def test_a_kind_is_written_as_its_string() -> None:
    record = RunError(FailureKind.CANCELLED, "cancelled by me", False).to_record()
    assert json.dumps(record) == '{"kind": "cancelled", "message": "cancelled by me", "transient": false}'
    assert UNREADABLE_CHUNK_ERROR.to_record() == {"kind": "error", "message": "failed", "transient": False}


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "timeout",
        ["timeout", "x", True],
        {"kind": "timeout", "message": "x"},  # no transient
        {"message": "x", "transient": True},  # no kind
        {"kind": "timeout", "transient": True},  # no message
        {"kind": None, "message": "x", "transient": True},
        {"kind": "timeout", "message": 3, "transient": True},
        {"kind": "timeout", "message": "x", "transient": "yes"},
        {"kind": "timeout", "message": "x", "transient": 1},
    ],
)
def test_what_is_not_a_run_error_is_refused(raw: object) -> None:
    with pytest.raises(ValueError):
        RunError.from_record(raw)


def test_a_run_error_is_validated_when_built() -> None:
    with pytest.raises(ValueError, match="transient"):
        RunError("timeout", "x", 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kind"):
        RunError(None, "x", True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="extra"):
        RunError("timeout", "x", True, {"kind": "other"})
    error = RunError("timeout", "x", True)
    with pytest.raises(AttributeError):
        error.kind = "other"  # type: ignore[misc]
