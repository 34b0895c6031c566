"""Removing a spool directory tree on a thread of its own, so that a removal that hangs hangs alone.

A claim that recovery parked (``.spoolrender/abandoned/``) may still hold the heartbeat of a
claimer that was frozen in the middle of writing it. On GlusterFS the frozen client keeps
the entry locks of that write on the bricks for as long as it is frozen (its TCP connection
stays up), and an unlink of that name waits behind them (docs/reliability.md, "A frozen
host's locks"); the kernel also holds the directory's lock during the unlink, so every
later look into that directory from this host waits too. The recoverer's loop must never
wait with it: the tree is removed by a daemon thread, at most one per tree, and callers ask
:func:`removing` first and leave a tree under removal alone (not even a look inside).
Bounded effort: a tree whose removal hangs costs one parked thread, never a pass of the loop.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from spoolrender.spool.tree_removal import remove_tree_at

log = logging.getLogger(__name__)

_lock = threading.Lock()
_removing: set[tuple[str, str]] = set()  # (parent directory, name) of trees being removed


def removing(parent: Path, name: str) -> bool:
    """Whether ``parent/name`` is being removed by :func:`remove_tree` right now."""
    with _lock:
        return (str(parent), name) in _removing


def remove_tree(parent: Path, name: str) -> bool:
    """Start removing the tree ``parent/name`` on its own thread; False (nothing started) if
    its removal is already under way. Errors are logged (a tree left is removed again by
    whoever finds it next)."""
    key = (str(parent), name)
    with _lock:
        if key in _removing:
            return False
        _removing.add(key)
    thread = threading.Thread(target=_remove, args=(parent, name, key), name=f"remove {name}", daemon=True)
    thread.start()
    return True


def _remove(parent: Path, name: str, key: tuple[str, str]) -> None:
    try:
        # Through the parent's descriptor, never following a symlink (tree_removal walks
        # the tree by descriptors): a name swapped for a link meanwhile cannot send the
        # removal elsewhere.
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            remove_tree_at(fd, name)
        finally:
            os.close(fd)
    except FileNotFoundError:
        pass  # removed by another runner meanwhile
    except OSError as exc:
        log.warning("could not remove %s/%s: %s", parent.name, name, exc)
    finally:
        with _lock:
            _removing.discard(key)
