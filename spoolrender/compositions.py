"""A Remotion project's compositions as job authors need them: size, fps, duration,
default props and the props JSON schema, read from the project's cached bundle.

Listing opens Chromium on the bundle (``worker/compositions.mjs``), which takes seconds;
the result is stored in the bundle directory (``compositions.json``), whose name is the
bundle's content key, so it is valid exactly as long as the bundle is: ``submit`` checks
a job's composition and still frame against it without starting Node, knows which
compositions have a schema to call (``spoolrender.renderers.remotion.props_check``), and falls silent when
the project changed since it was listed (the runner checks again before the first frame).
The props JSON Schema is for display: props are checked with the zod schema itself.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spoolrender.core.suggest import did_you_mean
from spoolrender.core.vocabulary import FailureKind
from spoolrender.errors import RenderError, SpoolrenderError
from spoolrender.renderers.remotion.bundle_cache import cached_bundle, ensure_bundle, last_json_object
from spoolrender.renderers.remotion.project import WORKER_DIR, setup_error
from spoolrender.spool.durable import write_atomic

log = logging.getLogger(__name__)

LISTING_FILE = "compositions.json"
# Why the last listing of this bundle failed ({"reason": ...}): `submit` says so instead of
# checking against nothing, and never blames the job's composition for it.
LISTING_FAILED_FILE = "compositions-failed.json"
LIST_TIMEOUT_S = 300


@dataclass(frozen=True)
class Composition:
    """One composition as Remotion resolves it for its default props.

    Attributes:
        id: The composition id a job's ``composition:`` names.
        width: Width in pixels.
        height: Height in pixels.
        fps: Frames per second.
        duration_in_frames: Its length, as ``calculateMetadata`` resolves it for the default props.
        default_props: The props a job's ``props:`` are merged over.
        schema: The props JSON Schema (zod 4 schemas only), for display, else None.
        schema_note: Why there is no JSON Schema, when the composition has a schema.
        has_schema: Whether it declares a schema props are checked with (zod 3 or 4).
    """

    id: str
    width: int
    height: int
    fps: float
    duration_in_frames: int
    default_props: dict[str, Any] = field(default_factory=dict)
    schema: dict[str, Any] | None = None
    schema_note: str | None = None
    has_schema: bool = False

    def __post_init__(self) -> None:
        if not self.id or self.width <= 0 or self.height <= 0 or self.fps <= 0 or self.duration_in_frames <= 0:
            raise ValueError(f"invalid composition {self!r}")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Composition:
        return cls(
            id=str(data["id"]),
            width=int(data["width"]),
            height=int(data["height"]),
            fps=float(data["fps"]),
            duration_in_frames=int(data["durationInFrames"]),
            default_props=dict(data.get("defaultProps") or {}),
            schema=data.get("schema") if isinstance(data.get("schema"), dict) else None,
            schema_note=str(data["schemaNote"]) if data.get("schemaNote") else None,
            # A page that could not be read (null), or a listing older than the field: the
            # check is tried, and says itself when there is no schema.
            has_schema=data["hasSchema"]
            if isinstance(data.get("hasSchema"), bool)
            else data.get("schema") is not None or bool(data.get("schemaNote")),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "width": self.width,
            "height": self.height,
            "fps": int(self.fps) if self.fps.is_integer() else self.fps,
            "duration_in_frames": self.duration_in_frames,
            "duration_seconds": round(self.duration_in_frames / self.fps, 3),
            "default_props": self.default_props,
            "props_schema": self.schema,
            "schema_note": self.schema_note,
            "has_schema": self.has_schema,
        }


def list_compositions(project: Path, cache_dir: Path, browser_executable: str) -> list[Composition]:
    """The compositions of ``project``'s current content, bundling and listing as needed."""
    bundle = ensure_bundle(project, cache_dir)
    cached = _read_listing(bundle)
    if cached is not None:
        return cached
    if not Path(browser_executable).exists():
        raise setup_error(
            f"browser {browser_executable} not found: install Debian's chromium or set browser_executable"
        )
    try:
        proc = subprocess.run(
            ["node", str(WORKER_DIR / "compositions.mjs"), "--project", str(project.resolve()),
             "--serve-url", str(bundle), "--browser-executable", browser_executable],
            cwd=project.resolve(), stdin=subprocess.DEVNULL, capture_output=True,
            timeout=LIST_TIMEOUT_S, check=False, start_new_session=True,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RenderError(
            f"listing the compositions failed: {exc}", transient=True, kind=FailureKind.COMPOSITIONS
        ) from exc
    event = last_json_object(proc.stdout)
    stderr_tail = _last_line(proc.stderr.decode("utf-8", "replace"))
    if proc.returncode != 0 or event.get("type") != "compositions":
        message = str(event.get("message") or stderr_tail or f"exit status {proc.returncode}")
        _record_failure(bundle, message)
        if event.get("kind") == FailureKind.SETUP:
            raise setup_error(message)
        raise RenderError(f"listing the compositions failed: {message}", transient=True, kind=FailureKind.COMPOSITIONS)
    raw = event.get("compositions")
    if not isinstance(raw, list) or not raw:
        # No composition at all is the root failing to register them (an error in the page
        # logged on stderr), not a project without compositions: nothing to check against.
        why = "no list in the answer" if not isinstance(raw, list) else "the project registered no compositions"
        message = f"{why}{f' ({stderr_tail})' if stderr_tail else ''}"
        _record_failure(bundle, message)
        raise RenderError(f"listing the compositions failed: {message}", transient=True, kind=FailureKind.COMPOSITIONS)
    # Stored under the bundle's content key: another process may write the same bytes
    # meanwhile, so an atomic replace keeps every reader's view whole.
    write_atomic(bundle / LISTING_FILE, json.dumps(raw).encode())
    (bundle / LISTING_FAILED_FILE).unlink(missing_ok=True)
    return [Composition.from_json(c) for c in raw]


def _last_line(text: str) -> str:
    """The last line of a worker's stderr that says something (Debian's chromium wrapper
    prints a harmless `[: ...: unexpected operator`)."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and "unexpected operator" not in line]
    return lines[-1][:300] if lines else ""


def _record_failure(bundle: Path, reason: str) -> None:
    # Atomic for the same reason as the listing itself; a spool that cannot store it
    # only loses the better `submit` message.
    try:
        write_atomic(bundle / LISTING_FAILED_FILE, json.dumps({"reason": reason}).encode())
    except OSError as exc:
        log.warning("cannot record the failed composition listing in %s: %s", bundle, exc)


def listing_failure(project: Path, cache_dir: Path) -> str | None:
    """Why the last listing of ``project``'s current bundle failed, or None (never
    listed, listed fine, or not usable)."""
    try:
        bundle = cached_bundle(project, cache_dir)
        if bundle is None:
            return None
        return str(json.loads((bundle / LISTING_FAILED_FILE).read_bytes())["reason"])
    except FileNotFoundError:
        return None
    except (SpoolrenderError, OSError, ValueError, TypeError, KeyError):
        return None


def cached_compositions(project: Path, cache_dir: Path) -> list[Composition] | None:
    """The listing of ``project``'s current bundle if one was made, without building or
    starting anything; None when there is none (or the project is not usable)."""
    try:
        bundle = cached_bundle(project, cache_dir)
    except SpoolrenderError:
        return None
    return None if bundle is None else _read_listing(bundle)


def submit_problems(
    compositions: list[Composition], composition: str, props: dict[str, Any], still_frame: int | None = None
) -> list[str]:
    """A job's problems against a project's listing: an unknown composition, a still
    frame past its end. Phrased as job-file problems (``field 'still'``); its props are
    checked with the schema itself (``spoolrender.renderers.remotion.props_check``).

    The listing's duration is the one ``calculateMetadata`` gives the default props: a
    still frame is checked only when the job's props leave them as they are (other props
    may lengthen the composition; the runner checks again before the first frame)."""
    if not compositions:  # a listing without compositions is a failed one: no verdict
        return []
    by_id = {c.id: c for c in compositions}
    found = by_id.get(composition)
    if found is None:
        known = ", ".join(sorted(by_id)) or "none"
        hint = did_you_mean(composition, by_id)
        return [
            f"field 'composition': {composition!r} is not a composition of the project (it has: {known})"
            + (f"; {hint}" if hint else "")
        ]
    problems: list[str] = []
    last = found.duration_in_frames - 1
    if still_frame is not None and still_frame > last and {**found.default_props, **props} == found.default_props:
        problems.append(
            f"field 'still': frame {still_frame} is past the end of {composition} "
            f"({found.duration_in_frames} frames: 0-{last})"
        )
    return problems


def _read_listing(bundle: Path) -> list[Composition] | None:
    try:
        raw = json.loads((bundle / LISTING_FILE).read_bytes())
        return [Composition.from_json(c) for c in raw]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        log.warning("ignoring the unreadable composition listing in %s: %s", bundle, exc)
        return None


def describe(compositions: list[Composition]) -> str:
    """The human-readable listing of ``spoolrender compositions``."""
    lines: list[str] = []
    for c in compositions:
        seconds = c.duration_in_frames / c.fps
        lines.append(f"{c.id}  {c.width}x{c.height}  {c.fps:g} fps  {c.duration_in_frames} frames ({seconds:.2f} s)")
        lines.append(f"  default props: {json.dumps(c.default_props, ensure_ascii=False)}")
        if c.schema is not None:
            lines.extend("  " + line for line in _schema_lines(c.schema, c.default_props))
        elif c.schema_note:
            lines.append(f"  props schema: {'not shown' if c.has_schema else 'none'} ({c.schema_note})")
        else:
            lines.append("  props schema: none (the composition declares no schema; props are not checked)")
        lines.append("")
    return os.linesep.join(lines).rstrip() + "\n"


def _schema_lines(schema: dict[str, Any], default_props: dict[str, Any]) -> list[str]:
    """One line per top-level prop: name, type, whether a job must give it, bounds."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return [f"props schema: {json.dumps(schema)}"]
    required = set(schema.get("required") or [])
    lines = ["props:"]
    for name, sub in properties.items():
        sub = sub if isinstance(sub, dict) else {}
        # An enum is its values (zod's z.enum is {"type": "string", "enum": [...]}).
        kind = "one of " + ", ".join(map(json.dumps, sub["enum"])) if isinstance(sub.get("enum"), list) else None
        kind = kind or sub.get("type") or ("one of " + json.dumps(sub["const"]) if "const" in sub else "any")
        extras = [f"{k} {sub[k]}" for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum",
                                            "minLength", "maxLength", "minItems", "maxItems") if k in sub]  # fmt: skip
        if name in default_props or "default" in sub:  # the composition's default, else the schema's
            flag = f"default {json.dumps(default_props.get(name, sub.get('default')), ensure_ascii=False)[:40]}"
        else:
            flag = "required" if name in required else "optional"
        lines.append(f"  {name}: {kind if isinstance(kind, str) else '|'.join(kind)}, {flag}"
                     + (f" ({', '.join(extras)})" if extras else ""))  # fmt: skip
    if schema.get("additionalProperties") is False:
        lines.append("  (no other props)")
    return lines
