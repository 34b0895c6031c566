"""The examples of the docs: every fenced code block of README.md and docs/**/*.md, with its kind.

The marking rules are docs contract of issue 25 (tests/e2e/test_docs_examples.py's docstring
repeats them). A block's kind comes from ``<!-- example: KIND -->`` on the line directly
above its opening fence, else a default by language; what has neither is an
:class:`Example` with a ``problem``, which the test reports as a failure at its location.

Also the checks of the kinds that need no subprocess (job, config, config-fragment,
json): each returns None, or a message that starts with the block's location.
"""

from __future__ import annotations

import enum
import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from spoolrender import defaults
from spoolrender.config.settings import config_template
from spoolrender.config.spool_config import load_config
from spoolrender.errors import ConfigError, JobInvalid, SpoolrenderError
from spoolrender.ops import submission
from spoolrender.spool.layout import init_spool


class Kind(enum.Enum):
    """What an example is, so how it is checked (the contract's KINDs)."""

    JOB = "job"
    CONFIG = "config"
    CONFIG_FRAGMENT = "config-fragment"
    SHELL = "shell"
    SHELL_REMOTION = "shell-remotion"
    PYTHON = "python"
    JSON = "json"
    OUTPUT = "output"
    NOT_RUN = "not-run"


# Run in a page's terminal (tests/support/docs_terminal.py), in page order.
RUN_KINDS = frozenset({Kind.SHELL, Kind.SHELL_REMOTION, Kind.PYTHON})
_MARKER = re.compile(r"\s*<!--\s*example:\s*(?P<kind>.*?)\s*-->\s*")
# CommonMark fences: three or more backticks or tildes; a backtick fence's info string
# has no backtick. Any indentation (a fence inside a list item or an admonition).
_OPENING = re.compile(r"(?P<indent>[ \t]*)(?P<fence>`{3,}(?=[^`]*$)|~{3,})(?P<info>.*)")
_CONFIG_HEADER = re.compile(r"#\s*spoolrender\.yaml\b.*")
_SNIPPET = re.compile(r'^[ \t]*-{2,}8<-{2,}[ \t]+"(?P<path>[^"]+)"', re.MULTILINE)  # pymdownx.snippets
_YAML = frozenset({"yaml", "yml"})
_OUTPUT = frozenset({"", "text", "txt"})
JOB_FILE_NAME = "example.yaml"  # the name a job example is submitted under


@dataclass(frozen=True)
class Example:
    """One fenced block (or a marker that belongs to none): where it is, what it is."""

    page: str  # relative to the repository, e.g. docs/configuration.md
    line: int  # the opening fence's line (1-based); the text starts on the next line
    lang: str  # the info string's first word, lower case ("" for none)
    text: str
    kind: Kind | None = None  # None: see problem
    reason: str = ""  # not-run's reason
    problem: str | None = None  # why the block has no kind it can be checked as
    config: Example | None = None  # the page's most recent `config` block above this one

    @property
    def id(self) -> str:
        """The pytest id: ``docs/configuration.md:42-yaml``."""
        return f"{self.page}:{self.line}-{self.lang or 'plain'}"

    @property
    def location(self) -> str:
        """page:line of the opening fence."""
        return f"{self.page}:{self.line}"


def _info_language(info: str) -> str:
    word = info.strip().split(maxsplit=1)[0] if info.strip() else ""
    return word.strip("{}").lstrip(".").lower()


def _marked_kind(marker: str) -> tuple[Kind | None, str, str | None]:
    """(kind, not-run reason, problem) of a marker's text."""
    name, sep, reason = marker.partition(":")
    name = name.strip()
    try:
        kind = Kind(name)
    except ValueError:
        known = ", ".join(k.value for k in Kind)
        return None, "", f"unknown example kind {marker!r} (known: {known})"
    if kind is Kind.NOT_RUN:
        if not reason.strip():
            return None, "", "`not-run` needs a reason: <!-- example: not-run: REASON -->"
        return kind, reason.strip(), None
    if sep:
        return None, "", f"only not-run takes a reason, got {marker!r}"
    return kind, "", None


def _default_kind(lang: str, text: str) -> tuple[Kind | None, str | None]:
    """The kind of an unmarked block, by its language (the contract's defaults)."""
    if lang in _YAML:
        first = text.split("\n", 1)[0].strip()
        return (Kind.CONFIG if _CONFIG_HEADER.fullmatch(first) else Kind.JOB), None
    if lang == "json":
        return Kind.JSON, None
    if lang in _OUTPUT:
        return Kind.OUTPUT, None
    return None, (
        f"unmarked example (```{lang} has no default kind): put <!-- example: KIND --> on the line above "
        "its fence (shell, shell-remotion, python, ..., or not-run: REASON)"
    )


def _dedent(line: str, indent: int) -> str:
    """``line`` without up to ``indent`` leading blanks."""
    blanks = len(line) - len(line.lstrip(" \t"))
    return line[min(blanks, indent) :]


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def collect(page: str, markdown: str) -> list[Example]:
    """Every fenced block of one page, in order, with its kind (or its problem)."""
    lines = markdown.splitlines()
    examples: list[Example] = []
    config: Example | None = None
    marker: tuple[int, str] | None = None  # (line, text) of a marker waiting for its fence
    i = 0
    while i < len(lines):
        m = _OPENING.fullmatch(lines[i])
        if m is None:
            found = _MARKER.fullmatch(lines[i])
            if marker is not None:
                examples.append(_orphan(page, *marker))
            marker = (i + 1, found.group("kind")) if found else None
            i += 1
            continue
        indent, fence = len(m.group("indent")), m.group("fence")
        end = next((j for j in range(i + 1, len(lines)) if _closes(lines[j], fence)), None)
        body = lines[i + 1 : len(lines) if end is None else end]
        # The fence's indentation is not part of the text (as Python-Markdown's superfences).
        text = "\n".join(_dedent(b, indent) for b in body)
        text = text + "\n" if body else text
        lang = _info_language(m.group("info"))
        reason, problem = "", None
        if marker is not None:
            kind, reason, problem = _marked_kind(marker[1])
        else:
            kind, problem = _default_kind(lang, text)
        if end is None:
            kind, problem = None, f"the fence {fence} is never closed"
        example = Example(page, i + 1, lang, text, kind, reason, problem, config)
        examples.append(example)
        if kind is Kind.CONFIG:
            config = example
        marker = None
        i = len(lines) if end is None else end + 1
    if marker is not None:
        examples.append(_orphan(page, *marker))
    return examples


def _orphan(page: str, line: int, text: str) -> Example:
    return Example(
        page, line, "marker", "", problem=f"<!-- example: {text} --> is not on the line directly above a fence"
    )


def documentation_pages(repo: Path) -> list[Path]:
    """README.md, every docs/**/*.md, and the files they include (``--8<-- "bench/README.md"``):
    an included file's blocks are on the site too. In a stable order, each file once."""
    pages = [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]
    for page in list(pages):
        for m in _SNIPPET.finditer(page.read_text(encoding="utf-8")):
            # pymdownx.snippets' base_path is the repository (mkdocs.yml); "file:section"
            # includes a section of the file, whose blocks are collected with the file.
            included = repo / m.group("path").split(":", 1)[0]
            if included not in pages:
                pages.append(included)
    return pages


def collect_pages(repo: Path) -> list[Example]:
    """The examples of every documentation page of ``repo``."""
    out: list[Example] = []
    for path in documentation_pages(repo):
        out.extend(collect(path.relative_to(repo).as_posix(), path.read_text(encoding="utf-8")))
    return out


# --- the kinds checked in this process ------------------------------------------------


def _config_message(exc: ConfigError, spool: Path) -> str:
    # The loader names the file by its (temporary) path: the page is what the reader needs.
    return str(exc).replace(f"{spool}/", "")


def config_problem(example: Example) -> str | None:
    """Load the block's text, exactly as written, as a spool's spoolrender.yaml."""
    with tempfile.TemporaryDirectory(prefix="docs-config-") as tmp:
        spool = Path(tmp).resolve()
        (spool / defaults.CONFIG_FILENAME).write_text(example.text, encoding="utf-8")
        try:
            load_config(spool, environ={})
        except ConfigError as exc:
            return f"{example.location}: {_config_message(exc, spool)}"
    return None


def job_problem(example: Example) -> str | None:
    """Validate the block as ``spoolrender submit`` does (the same function), in a spool
    configured by the page's most recent config block, else by ``spoolrender init``'s file."""
    with tempfile.TemporaryDirectory(prefix="docs-job-") as tmp:
        layout = init_spool(Path(tmp) / "spool", config_text=config_template())  # as `spoolrender init`
        if example.config is not None:
            (layout.root / defaults.CONFIG_FILENAME).write_text(example.config.text, encoding="utf-8")
        try:
            config = load_config(layout.root, environ={})
        except ConfigError as exc:
            where = "spoolrender init's config" if example.config is None else example.config.location
            why = _config_message(exc, layout.root)
            return f"{example.location}: its spool's config ({where}) does not load: {why}"
        try:
            submission.submit(config, example.text.encode("utf-8"), JOB_FILE_NAME)
        except JobInvalid as exc:
            return f"{example.location}: invalid job: " + "; ".join(exc.problems)
        except SpoolrenderError as exc:
            return f"{example.location}: refused by submit: {exc}"
    return None


def json_problem(example: Example) -> str | None:
    try:
        json.loads(example.text)
    except json.JSONDecodeError as exc:
        return f"{example.page}:{example.line + exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})"
    return None
