"""Waiting jobs counted by route (queue and required tags) from incoming/'s own files, for
`status` when no runner reports them (before any runner started, or while none is online).

Apart from config/queues.py because it reads job files: the job-file checks use config/queues.py's
names and routes, so config/queues.py itself must not depend on them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spoolrender.config.queues import Route, incoming_view, name_problem, queue_dir_of, route, waiting_groups
from spoolrender.errors import SpoolrenderError
from spoolrender.jobfile import load_yaml_mapping, read_job_bytes


def listed_groups(incoming: Path, names: list[str], read_limit: int, max_bytes: int) -> list[dict[str, Any]]:
    """Waiting jobs counted by route from a listing of incoming/, for when no runner reports them.

    A job's queue is its queue directory, else its ``queue:`` field; its tags its
    ``requires:``. Only the first ``read_limit`` files are read for those fields (status
    must stay fast on a deep backlog); the others count under their directory's queue, or
    the default one, without tags. Retry entries are left out: runners report those.
    """
    routes: list[tuple[Route, float]] = []
    with incoming_view(incoming) as view:
        listed = set(view.names)
        for i, name in enumerate(n for n in names if n in listed):
            st = view.stat(name)
            if st is None:
                continue  # claimed meanwhile
            declared: Any = None
            requires: Any = ()
            if i < read_limit:
                try:
                    doc = load_yaml_mapping(read_job_bytes(view.anchored(name), max_bytes))
                    declared, requires = doc.get("queue"), doc.get("requires") or ()
                except (OSError, SpoolrenderError):
                    pass  # unreadable or invalid: a runner fails it; counted where it was dropped
            queue = queue_dir_of(name) or (declared if name_problem("queue", declared) is None else None)
            tags = [requires] if isinstance(requires, str) else requires if isinstance(requires, list) else []
            routes.append((route(queue, [t for t in tags if name_problem("tag", t) is None]), st.st_mtime))
    return waiting_groups(routes)
