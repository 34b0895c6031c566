"""No module outside spoolrender/spool/spooldir.py builds a spool path from a name it got from a
listing (issue 20, item 6), checked mechanically on the source.

How: each module's AST is searched for ``<spool dir> / <expr>`` where ``<spool dir>`` is
``layout.<state>`` (``incoming``, ``running``, ... ``ids``, ``runners``; any object: also
``self._layout.<state>``) or ``<x>.state_dir(...)``, and ``<expr>`` uses a variable bound
from a listing: the target of a ``for`` or comprehension over an expression that calls a
lister (``list_names``, ``list_incoming``, ``os.listdir``, ``os.scandir``, ``.names()``,
``.iterdir()``, ``.glob()``), or a variable assigned from such an expression and then
iterated. Such a path is resolved again, component by component, when used: exactly what
a swapped queue directory exploits.

Limits (what it cannot see): a listed name passed to another function and joined there, a
path joined by ``os.path.join`` or f-strings, names listed through a helper with another
name, and aliases of the layout's directories (``d = layout.running; d / name``): so it
does not see intake/claim.py's ``layout.incoming / candidate.name`` (a listed name carried in a
Candidate; owncopy's branch converts it to queue_dirs.candidate_dir). It is a
tripwire for the common shape, not a proof; the descriptor tests (test_spooldir*.py) are
the proof for the paths they drive. ``# spooldir: message only`` on a line exempts a path
that is only ever printed (never opened).

``NOT_YET_CONVERTED`` lists the modules that still do it, each with why it is tolerated
for now; the test also fails when a listed module no longer does it, so the list only
shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "spoolrender"
STATE_ATTRS = frozenset({"incoming", "running", "retry", "done", "failed", "split", "private", "ids", "runners"})
LISTERS = frozenset({"list_names", "list_incoming", "listdir", "scandir", "names", "iterdir", "glob"})
EXEMPT = "# spooldir: message only"

# Every module is converted (the last were intake/retry_scan.py, chunks/moves.py, lifecycle/recovery.py): a
# module added here must say why it is tolerated, and the list only shrinks.
NOT_YET_CONVERTED: dict[str, str] = {}


def _is_spool_dir(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute) and node.attr in STATE_ATTRS:
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "state_dir"


def _calls_lister(expr: ast.AST, listed_vars: set[str]) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in LISTERS:
                return True
        if isinstance(node, ast.Name) and node.id in listed_vars:
            return True
    return False


def _names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def findings(source: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of every spool path built from a listed name in ``source``."""
    tree = ast.parse(source)
    lines = source.splitlines()
    listings: set[str] = set()  # variables holding a listing
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _calls_lister(node.value, set()):
            for target in node.targets:
                listings |= _names(target)
    listed: set[str] = set()  # variables holding one listed name
    for node in ast.walk(tree):
        if isinstance(node, ast.For | ast.comprehension) and _calls_lister(node.iter, listings):
            listed |= _names(node.target)
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _is_spool_dir(node.left)):
            continue
        uses_listed = any(isinstance(n, ast.Name) and n.id in listed for n in ast.walk(node.right))
        if uses_listed and EXEMPT not in lines[node.lineno - 1]:
            out.append((node.lineno, ast.unparse(node)))
    return sorted(out)


def test_the_check_sees_the_banned_shape() -> None:
    banned = "for name in list_names(layout.running):\n    os.rename(layout.running / name, x)\n"
    assert findings(banned) == [(2, "layout.running / name")]
    names = "names = sorted(view.names())\nfor n in names:\n    p = self._layout.state_dir(s) / n\n"
    assert findings(names) == [(3, "self._layout.state_dir(s) / n")]
    assert findings("p = layout.private / defaults.PAUSE_FILENAME\n") == []
    assert findings(f"for n in list_names(d):\n    p = layout.done / n  {EXEMPT}\n") == []


def test_no_module_builds_a_spool_path_from_a_listed_name() -> None:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "spool/spooldir.py":
            continue
        hits = findings(path.read_text(encoding="utf-8"))
        if hits:
            found[rel] = hits
    new = {rel: hits for rel, hits in found.items() if rel not in NOT_YET_CONVERTED}
    assert not new, f"spool paths built from listed names (use spoolrender.spool.spooldir): {new}"
    stale = sorted(set(NOT_YET_CONVERTED) - set(found))
    assert not stale, f"converted: remove from NOT_YET_CONVERTED: {stale}"
