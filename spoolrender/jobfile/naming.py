"""What a job and its output are called: job ids (declared or derived from the file
name), which names in incoming/ are jobs at all, and which output paths are allowed."""

from __future__ import annotations

import hashlib
import re

from spoolrender import defaults

ID_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{defaults.MAX_ID_LENGTH - 1}}}")
ID_RULE = "1-128 characters of A-Z a-z 0-9 . _ - starting with a letter or digit"
# The output's suffix picks the scratch file's name, which a command renderer gets as
# {output}: letters and digits only, so no job can put shell or option syntax there.
OUTPUT_SUFFIX_PATTERN = re.compile(r"[A-Za-z0-9]{1,16}")
# A derived id that is not the file name as written ends in "-" and this many hex digits
# of a hash of the name: names that clean up to the same text (all non-ASCII names, long
# names with a common prefix) still get different ids.
_NAME_HASH_DIGITS = 12


def is_candidate_name(name: str) -> bool:
    """False for names that mark an upload in progress (``.x``, ``x.part``, ``x.tmp``, ``x~``)."""
    return not (name.startswith(defaults.IGNORED_PREFIXES) or name.endswith(defaults.IGNORED_SUFFIXES))


def id_from_filename(name: str) -> str:
    """The default job id: the file name without its job suffix.

    A stem that is a valid id is the id as it is (so ``f"{job_id}.yaml"`` always gives
    ``job_id`` back). Any other stem is cleaned up (runs of other characters become
    ``_``, cut to fit) and gets a hash of the whole name appended, so two different
    names never share a derived id by accident: ``レポート.yaml`` and ``請求書.yaml`` become
    ``job-<hash>`` with different hashes.
    """
    stem = name
    for suffix in defaults.JOB_SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    if ID_PATTERN.fullmatch(stem):
        return stem
    # surrogateescape: os.listdir gives undecodable bytes of a name as lone surrogates.
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:_NAME_HASH_DIGITS]
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._-") or "job"
    return f"{cleaned[: defaults.MAX_ID_LENGTH - _NAME_HASH_DIGITS - 1]}-{digest}"


def filename_origin(name: str) -> str:
    """How reasons name an id derived from the file ``name`` (never the `id:` field)."""
    return f"id from the file name {name[:80]!r}"


def _quoted(text: str) -> str:
    """``text`` as a reason quotes it: escaped, and cut short (it could be 1 MiB long)."""
    return repr(text) if len(text) <= 60 else repr(text[:57]) + "..."


def output_path_problem(text: str) -> str | None:
    """Why ``text`` cannot be an output path under the output root, or None if it can."""
    if not text or "\x00" in text:
        return "expected a relative file path, got an empty or NUL-containing string"
    if text.startswith("/") or "\\" in text:
        return f"expected a path relative to the output root, got {_quoted(text)}"
    parts = text.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            return f"'.', '..' and empty components are not allowed, got {_quoted(text)}"
        if part.startswith("."):
            return f"hidden names (starting with '.') are reserved, got {_quoted(text)}"
        if len(part.encode("utf-8", "surrogateescape")) > 255:
            return f"a path component is longer than 255 bytes in {_quoted(text)}"
    if len(text) > 1024:
        return "expected a path of at most 1024 characters"
    last = parts[-1]
    if "." in last:
        suffix = last.rsplit(".", 1)[1]
        if not OUTPUT_SUFFIX_PATTERN.fullmatch(suffix):
            return f"the file name's suffix must be 1-16 letters or digits (such as mp4), got {_quoted(text)}"
    return None
