"""Did-you-mean hints for job ids: the ids in a spool closest to one that is not in it.

The ids come from the state directories' listings alone (entry names carry them), never
from reading a job file: a hint must stay as cheap as the listing. The matching itself is
:func:`spoolrender.core.suggest.close_matches` (ids that contain what was typed first). Apart
from core/suggest.py because it reads the spool: the job-file checks use core/suggest.py, and the
spool's modules import those checks.
"""

from __future__ import annotations

from pathlib import Path

from spoolrender import defaults
from spoolrender.config.queues import list_incoming
from spoolrender.core.suggest import close_matches
from spoolrender.jobfile.naming import id_from_filename
from spoolrender.spool.layout import FINAL_NAME, RETRY_NAME, RUNNING_NAME, SpoolLayout, list_names


def spool_ids(names_by_state: dict[str, list[str]]) -> set[str]:
    """The job ids that entry names carry (incoming/: the file name's stem), without reading
    a file: a hint must stay as cheap as the listing it comes from."""
    patterns = {"running": RUNNING_NAME, "retry": RETRY_NAME}
    ids = set()
    for state, names in names_by_state.items():
        for name in names:
            if name.startswith("."):
                continue
            if state == "incoming":
                ids.add(id_from_filename(name.rpartition("/")[2]))
                continue
            m = patterns.get(state, FINAL_NAME).fullmatch(name)
            if m:
                ids.add(m.group("id"))
    return ids


def close_ids(spool_root: Path, job_id: str) -> list[str]:
    """The ids in the spool at ``spool_root`` closest to ``job_id`` (not in it), best first."""
    layout = SpoolLayout(spool_root)
    names = {state: list_names(layout.state_dir(state)) for state in defaults.STATE_DIRS if state != "incoming"}
    names["incoming"] = list_incoming(layout.incoming)
    return close_matches(job_id, spool_ids(names), contained=True)


def id_hint(spool_root: Path, job_id: str) -> str:
    """``"; did you mean 'intro-welcome'?"`` for an id not in the spool at ``spool_root``, or ""."""
    return ids_hint(close_ids(spool_root, job_id))


def ids_hint(found: list[str]) -> str:
    """``"; did you mean 'a' or 'b'?"`` for the close ids ``found`` (:func:`close_ids`), or ""."""
    return "; did you mean " + " or ".join(repr(m) for m in found) + "?" if found else ""
