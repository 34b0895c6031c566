"""The spool's vocabulary (spoolrender.core.vocabulary): every enum value is the string already on
disk, every kind the package or its Node worker reports is a member, and records written
with members read back as the same plain strings (JSON and YAML). Unit tests: no subprocess."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import yaml

import spoolrender
from spoolrender import defaults
from spoolrender.core.vocabulary import (
    WORKER_KINDS,
    CancelReason,
    FailureKind,
    JobState,
    RunOutcome,
    is_known_kind,
)
from spoolrender.errors import ChunkPartInvalid, RenderError
from spoolrender.renderers.base import CancelToken
from spoolrender.spool.layout import SpoolLayout
from spoolrender.spool.records import FAILED, OUTCOMES, RETRY, RunRecord, decide, read_runs

PACKAGE = Path(spoolrender.__file__).parent
REPO = PACKAGE.parent
KIND_VALUES = {k.value for k in FailureKind}


def test_job_states_are_the_state_directories() -> None:
    layout = SpoolLayout(Path("/spool"))
    assert [getattr(layout, s.name.lower()).name for s in JobState] == [s.value for s in JobState]
    assert defaults.STATE_DIRS == ("incoming", "running", "retry", "done", "failed", "split")
    assert all(type(s) is str for s in defaults.STATE_DIRS)  # argparse shows choices by repr


def test_outcomes_are_the_documented_record_outcomes() -> None:
    assert set(OUTCOMES) == {o.value for o in RunOutcome}
    text = (REPO / "docs/how-it-works.md").read_text(encoding="utf-8")
    line = next(t for t in text.splitlines() if "the outcome (" in t)
    documented = set(re.findall(r"`([a-z-]+)`", line))
    assert documented and documented <= {o.value for o in RunOutcome}


def test_every_kind_the_docs_name_is_a_member() -> None:
    named: set[str] = set()
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        named |= set(re.findall(r"\bkind `([a-z][a-z-]*)`", page.read_text(encoding="utf-8")))
    assert named, "the docs name no kind: the pattern no longer matches them"
    assert named - KIND_VALUES == set()


def test_every_kind_the_node_worker_emits_is_a_member() -> None:
    worker = PACKAGE / "renderers" / "remotion" / "worker"
    errors = (worker / "errors.mjs").read_text(encoding="utf-8")
    classify = errors[errors.index("export const classify") :]
    classify = classify[: classify.index("\n};")]
    emitted = set(re.findall(r"return '([a-z-]+)';", classify))
    render = (worker / "render.mjs").read_text(encoding="utf-8")
    own = render[render.index("export const reportFailure") :]
    emitted |= set(re.findall(r"\? '([a-z-]+)'", own[: own.index("classify(")]))  # reportFailure's own kinds
    emitted |= set(re.findall(r"refuse\(jobId, '([a-z-]+)'", (worker / "render-worker.mjs").read_text("utf-8")))
    emitted |= set(re.findall(r"this\.kind = '([a-z-]+)'", (worker / "project.mjs").read_text("utf-8")))
    assert {"out-of-memory", "component-error", "invalid-settings", "busy", "setup"} <= emitted  # patterns still match
    assert emitted == {k.value for k in WORKER_KINDS}


def _literal_kinds(tree: ast.AST) -> list[tuple[int, str, object]]:
    """(line, what, string) of every string literal the code writes or compares as a kind
    or cancel reason: ``kind="..."``, ``{"kind": "..."}``, ``RunError("...", ...)``,
    ``x.get("kind") == "..."`` and ``.cancel("...")``."""
    found: list[tuple[int, str, object]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "kind" and isinstance(node.value, ast.Constant):
            found.append((node.lineno, "kind", node.value.value))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "kind" and isinstance(value, ast.Constant):
                    found.append((node.lineno, "kind", value.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute) and node.args:
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            first = node.args[0]
            if isinstance(first, ast.Constant) and name in ("RunError", "as_render_error"):
                found.append((node.lineno, "kind", first.value))
            if isinstance(first, ast.Constant) and name == "cancel":
                found.append((node.lineno, "cancel", first.value))
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Call):
            call = node.left
            if (
                isinstance(call.func, ast.Attribute)
                and call.func.attr == "get"
                and call.args
                and isinstance(call.args[0], ast.Constant)
                and call.args[0].value == "kind"
            ):
                for right in node.comparators:
                    if isinstance(right, ast.Constant):
                        found.append((node.lineno, "kind", right.value))
    return found


def test_no_kind_or_cancel_reason_literal_left_is_unknown() -> None:
    reasons = {r.value for r in CancelReason}
    unknown = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, what, value in _literal_kinds(ast.parse(path.read_text(encoding="utf-8"))):
            if value not in (KIND_VALUES if what == "kind" else reasons):
                unknown.append(f"{path.relative_to(REPO)}:{line}: {what} {value!r}")
    assert unknown == []


def test_the_scan_finds_literals() -> None:
    # The scan above must be able to fail: each form it checks is found in this sample.
    sample = """
RenderError("m", transient=True, kind="nope")
e = {"kind": "nope"}
RunError("nope", "m", False)
token.cancel("nope")
if event.get("kind") == "nope": pass
"""
    found = sorted((line, what) for line, what, value in _literal_kinds(ast.parse(sample)) if value == "nope")
    assert found == [(2, "kind"), (3, "kind"), (4, "kind"), (5, "cancel"), (6, "kind")]


def test_the_two_chunk_kinds_stay_apart() -> None:
    # chunk-invalid: a chunk output bad at the join (rendered again); invalid-chunk: a chunk
    # job whose description is unreadable. Both are on disk: neither may be renamed.
    assert FailureKind.CHUNK_INVALID.value == "chunk-invalid"
    assert FailureKind.INVALID_CHUNK.value == "invalid-chunk"
    assert ChunkPartInvalid(0, "gone").kind == "chunk-invalid"


def test_unknown_kinds_pass_through() -> None:
    error = RenderError("the command's own failure", transient=False, kind="license-expired")
    assert error.kind == "license-expired" and not is_known_kind(error.kind)
    assert is_known_kind("spool-io") and not is_known_kind(None) and not is_known_kind(3)
    assert RenderError("m", transient=True).kind == "error"


def test_cancel_reason_compares_as_its_string() -> None:
    token = CancelToken()
    token.cancel(CancelReason.TIMEOUT)
    token.cancel(CancelReason.SHUTDOWN)  # the first reason wins
    assert token.reason == "timeout" and f"{token.reason}" == "timeout"


def test_a_record_written_with_members_reads_back_as_plain_strings(tmp_path: Path) -> None:
    old = {"kind": "some-kind-of-an-older-version", "message": "m", "transient": True}
    records = [
        RunRecord(run=1, outcome=RETRY, host="h", pid=1, token="t", ended=1.0, attempt=1,
                  error={"kind": FailureKind.TIMEOUT, "message": "timed out", "transient": True}, due=2.0),
        RunRecord(run=2, outcome=FAILED, host="h", pid=1, token="t", ended=3.0, attempt=2, error=old),
    ]  # fmt: skip
    for record in records:
        assert decide(tmp_path, record)
    raw = json.loads((tmp_path / "run-0001.json").read_text(encoding="utf-8"))
    assert raw["outcome"] == "retry" and raw["error"]["kind"] == "timeout"
    back = read_runs(tmp_path)
    assert [(r.outcome, (r.error or {})["kind"]) for r in back] == [
        ("retry", "timeout"),
        ("failed", "some-kind-of-an-older-version"),
    ]
    for r in back:
        assert type(r.outcome) is str and type((r.error or {})["kind"]) is str
        text = yaml.safe_dump({"outcome": r.outcome, "error": r.error})  # YAML refuses str subclasses
        assert yaml.safe_load(text)["error"] == r.error
    assert json.dumps({FailureKind.SPOOL_IO: JobState.RETRY}) == '{"spool-io": "retry"}'
    # The trap the package avoids: YAML needs the value, never the member.
    assert yaml.safe_dump([str(RunOutcome.SPLIT)]) == "- split\n"
