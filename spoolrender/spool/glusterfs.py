"""What a GlusterFS mount must be for a spool, and how a runner reads what it is.

A GlusterFS FUSE client caches in two places: the kernel (``attribute-timeout``,
``entry-timeout``, ``negative-timeout``, the page cache unless ``direct-io-mode=enable``) and
its own translator graph (md-cache = ``performance.stat-prefetch``, quick-read, io-cache,
readdir-ahead). Measured on GlusterFS 10.3 replica 3 between network namespaces
(docs/reliability.md, "GlusterFS"): with the volume's defaults another host's rename,
unlink or rewrite is seen about a second late (md-cache), and with md-cache off but the page
cache kept a same-size rewrite is read stale indefinitely.

Every client exposes its own graph and command line in the virtual ``.meta`` directory at
the root of the mount (``.meta/graphs/active/volfile``, ``.meta/cmdline``), so the
start-up probe can name the exact option to change: :func:`mount_problems`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from spoolrender.errors import UnsupportedFilesystem

FUSE_TYPE = "fuse.glusterfs"

# The supported (tested) configuration; tests/reliability/gluster_lab.py builds its volume
# and mounts from these, docs/reliability.md ("GlusterFS: the supported options") explains
# each one. Volume options are set with `gluster volume set VOLUME KEY VALUE`.
VOLUME_OPTIONS: tuple[tuple[str, str], ...] = (
    # md-cache: attributes and names cached in the client for md-cache-timeout (1 s), past
    # the kernel and past a forced revalidation (statx AT_STATX_FORCE_SYNC).
    ("performance.stat-prefetch", "off"),
    # Small files' content cached at lookup: job files are small.
    ("performance.quick-read", "off"),
    # Content cached in the client.
    ("performance.io-cache", "off"),
    # Listings read ahead and served from the client.
    ("performance.readdir-ahead", "off"),
    # Eager locking keeps a replica transaction's inode lock after the write (post-op delay):
    # a host cut off in that window leaves the lock behind, and another host's unlink of that
    # file then hung on every brick for good (10.3, seen with a partitioned runner's clock
    # probe; every later lookup in the directory hung behind it).
    ("cluster.eager-lock", "off"),
    # Below the quorum (two of three bricks full, or down) a replace that failed can leave its
    # name on one brick with another file (gfid) than on the other two: a gfid split-brain,
    # EIO on that name and a heal that never ends until someone resolves it by hand (seen
    # with heartbeats and liveness files). The majority is what clients were told happened.
    ("cluster.favorite-child-policy", "majority"),
)
# Options of `mount -t glusterfs -o ...` (mount.glusterfs) for the spool and the output root.
MOUNT_OPTIONS: tuple[str, ...] = (
    "attribute-timeout=0",
    "entry-timeout=0",
    "negative-timeout=0",
    # Without it (and with md-cache off) the kernel keeps a file's pages across opens: a
    # rewrite of the same size by another host is read stale indefinitely (measured).
    "direct-io-mode=enable",
)

# Client-side translator type -> the volume option that puts it in the graph.
_CACHING_XLATORS = {
    "performance/md-cache": "performance.stat-prefetch",
    "performance/quick-read": "performance.quick-read",
    "performance/io-cache": "performance.io-cache",
    "performance/readdir-ahead": "performance.readdir-ahead",
}
# glusterfs command-line flag -> (the mount option that sets it, glusterfs 10's default s).
_KERNEL_TIMEOUTS = {
    "--attribute-timeout": ("attribute-timeout", 1.0),
    "--entry-timeout": ("entry-timeout", 1.0),
    "--negative-timeout": ("negative-timeout", 0.0),
}


@dataclass(frozen=True)
class ClientView:
    """What one GlusterFS client runs: its translators and its command line."""

    xlator_types: frozenset[str]
    md_cache_timeout: float
    argv: tuple[str, ...]
    favorite_child_policy: str = "none"  # cluster.favorite-child-policy (GlusterFS's default: none)

    def __post_init__(self) -> None:
        if self.md_cache_timeout < 0:
            raise ValueError(f"md_cache_timeout must be >= 0, not {self.md_cache_timeout}")
        if not self.favorite_child_policy:
            raise ValueError("favorite_child_policy must not be empty")

    def flag(self, name: str) -> str | None:
        """The value of ``--name=value`` on the client's command line, or None."""
        for arg in self.argv:
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
        return None

    @property
    def direct_io(self) -> bool:
        """True if the kernel drops a file's cached pages at each open."""
        return self.flag("--direct-io-mode") in ("enable", "on", "yes", "true") or self.flag("--fopen-keep-cache") in (
            "off",
            "no",
            "false",
        )

    @property
    def volume(self) -> str:
        """The volume's name (from ``--volfile-id``), for the commands the messages give."""
        return (self.flag("--volfile-id") or "VOLUME").strip("/") or "VOLUME"


def read_client(root: Path) -> ClientView:
    """The client of the GlusterFS mount at ``root``, from its ``.meta`` directory."""
    meta = root / ".meta"
    try:
        volfile = (meta / "graphs" / "active" / "volfile").read_text()
        cmdline = json.loads((meta / "cmdline").read_text())["Cmdlinestr"]
    except (OSError, ValueError, KeyError) as exc:
        raise UnsupportedFilesystem(f"cannot read the GlusterFS client's settings in {meta}: {exc}") from exc
    types = frozenset(re.findall(r"^\s*type\s+(\S+)", volfile, flags=re.MULTILINE))
    timeout = re.search(r"^\s*option\s+md-cache-timeout\s+(\S+)", volfile, flags=re.MULTILINE)
    policy = re.search(r"^\s*option\s+favorite-child-policy\s+(\S+)", volfile, flags=re.MULTILINE)
    return ClientView(
        xlator_types=types,
        md_cache_timeout=float(timeout.group(1)) if timeout else 1.0,
        argv=tuple(cmdline.split()),
        favorite_child_policy=policy.group(1) if policy else "none",
    )


def mount_problems(view: ClientView) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for a spool on this client, each naming the option to change."""
    refusals: list[str] = []
    warnings: list[str] = []
    md_cache = "performance/md-cache" in view.xlator_types
    if not md_cache and not view.direct_io:
        refusals.append(
            "the client keeps a file's cached pages across opens while performance.stat-prefetch is off: a job "
            "file rewritten by another host with the same size reads stale indefinitely. Mount with "
            "-o direct-io-mode=enable"
        )
    for xlator, option in _CACHING_XLATORS.items():
        if xlator not in view.xlator_types:
            continue
        if xlator == "performance/md-cache":
            what = (
                "another host's renames, unlinks and rewrites are seen up to performance.md-cache-timeout "
                f"({view.md_cache_timeout:g} s) late"
            )
        else:
            what = "another host's changes may be served from this client's cache"
        warnings.append(
            f"{what}: keep lease_seconds and settle_seconds well above that, or run "
            f"`gluster volume set {view.volume} {option} off`"
        )
    if "cluster/replicate" in view.xlator_types and view.favorite_child_policy == "none":
        warnings.append(
            "a file replaced while two of three bricks refuse writes (full: below storage.reserve, or down) can "
            "be left a different file on each side (a gfid split-brain): I/O errors on it and a heal that never "
            f"ends until resolved by hand. Run `gluster volume set {view.volume} cluster.favorite-child-policy "
            "majority`"
        )
    for flag, (option, default) in _KERNEL_TIMEOUTS.items():
        value = view.flag(flag)
        seconds = default if value is None else float(value)
        if seconds != 0:
            warnings.append(f"the kernel caches names or attributes for {seconds:g} s: mount with -o {option}=0")
    return refusals, warnings
