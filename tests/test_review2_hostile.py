"""Review 2 of issue 20: new examples of its classes, played by a hostile spool-group member.

Each test FAILS on the reviewed main (a06cdd8) and states what should hold instead. The
member is uid/gid 65534 (nobody/nogroup) acting through ``setpriv`` (tests run as root);
the spool is made with ``init_spool(group="nogroup")`` in a directory every uid can traverse.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import command_job, drop, entries, spoolrender_cmd, wait_for, write_spool_config

from spoolrender.layout import SpoolLayout, init_spool

MEMBER_UID = 65534
MEMBER_GROUP = "nogroup"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a second uid needs root")
pytestmark = needs_root
Start = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def spool() -> Iterator[SpoolLayout]:
    """A spool of group nogroup in a directory the member can reach (pytest's tmp is 0700)."""
    base = Path(tempfile.mkdtemp(prefix="review2-"))
    os.chmod(base, 0o755)
    layout = init_spool(base / "spool", group=MEMBER_GROUP)
    write_spool_config(layout, {"slots": 1})
    yield layout
    subprocess.run(["rm", "-rf", str(base)], check=False)


def as_member(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as the hostile spool-group member (uid 65534, group nogroup only)."""
    return subprocess.run(
        ["setpriv", f"--reuid={MEMBER_UID}", f"--regid={MEMBER_GROUP}", "--clear-groups", *argv],
        check=check,
        capture_output=True,
        text=True,
    )


def test_a_member_dropped_directory_gives_them_a_writable_dir_inside_failed(
    spool: SpoolLayout, start_runner: Start
) -> None:
    """Threat model breach (issue20-design: 'every state directory except incoming/ is the
    runner's: a member cannot create anything in them'). A member drops a *directory*
    ``incoming/d.yaml/``; the root runner renames it into ``running/<job>/submitted.yaml`` and fails it, keeping
    it as evidence in ``failed/<entry>/submitted.yaml``: still the member's, mode 0755 of
    theirs, so they can create anything inside failed/ (a tree deep enough that purge's
    fd-per-level rmtree runs out of descriptors, files of any size, symlinks...).
    Expected: a non-regular claimed entry is not kept where the member can write (record
    its kind and remove it / do not claim directories at all)."""
    incoming_dir = spool.incoming / "d.yaml"
    as_member("mkdir", "-m", "0755", str(incoming_dir))
    os.utime(incoming_dir, (1, 1))
    assert start_runner("--drain").wait(timeout=120) is not None
    wait_for(lambda: len(entries(spool, "failed")) == 1, timeout=60)
    (entry,) = entries(spool, "failed")
    evidence = spool.failed / entry / "submitted.yaml"
    planted = as_member("touch", str(evidence / "planted-by-member"), check=False)
    assert planted.returncode != 0, (
        f"the member created a file inside failed/{entry}/ (owner uid {os.lstat(evidence).st_uid})"
    )


def test_purge_survives_a_deep_tree_a_member_grew_inside_failed(spool: SpoolLayout, start_runner: Start) -> None:
    """Follows from the member-writable evidence directory above: the member grows a tree
    1,500 levels deep inside ``failed/<entry>/submitted.yaml/``. ``spoolrender purge`` (and
    retention, which shares forget_finished) dies with RecursionError in shutil.rmtree's
    recursive fd walk (forget_finished suppresses OSError only), so every purge stops at
    that entry and retention never frees failed/ again. Expected: purge removes it (an
    iterative, bounded walk) or reports it and goes on with the other entries."""
    incoming_dir = spool.incoming / "d.yaml"
    as_member("mkdir", "-m", "0755", str(incoming_dir))
    os.utime(incoming_dir, (1, 1))
    assert start_runner("--drain").wait(timeout=120) is not None
    (entry,) = entries(spool, "failed")
    evidence = spool.failed / entry / "submitted.yaml"
    grow = f"import os\nos.chdir({str(evidence)!r})\nfor _ in range(1500):\n    os.mkdir('a')\n    os.chdir('a')\n"
    as_member(sys.executable, "-c", grow)
    purged = subprocess.run(
        spoolrender_cmd("purge", "--spool", str(spool.root), "--older-than", "0m"), capture_output=True, text=True
    )
    assert "RecursionError" not in purged.stderr, purged.stderr[-400:]
    assert purged.returncode == 0 and entries(spool, "failed") == []


def test_another_member_appending_to_a_claimed_job_changes_what_it_renders(
    spool: SpoolLayout, start_runner: Start
) -> None:
    """Class A, new example. docs/contrib.md advises ``umask 002``, so a job file is 0664
    of the spool's group: every member may write it. After the claim the owncopy docstring
    promises "Nothing done to it can change a render". But a *continued append* (the
    prefix unchanged, more bytes after it) to ``running/<job>/submitted.yaml`` discards
    the run and the next claim copies the file again, appended keys included: here another
    member adds ``output:`` to the victim's job (which had none) and its video is published
    where they chose. Expected: the re-copy after a discard takes only what the original
    submitter could have been uploading (e.g. only when the appender is the file's owner
    and the file is not writable by others), or the job fails/asks for a resubmit."""
    from uploads_harness import job_hash_command

    write_spool_config(spool, {"slots": 1, "commands": {"jobhash": job_hash_command()}})
    base = spool.root.parent
    props = json.dumps({"read_marker": str(base / "read"), "hold_until": str(base / "release")})
    victim = f"renderer: command\ncommand: jobhash\nprops: {props}\n".encode()
    path = spool.incoming / "victim.yaml"
    path.write_bytes(victim)
    os.chown(path, 1, -1)  # the victim (uid 1), group = the spool's (incoming/ is setgid)
    os.chmod(path, 0o664)  # umask 002, as docs/contrib.md advises
    os.utime(path, (1, 1))
    inode = os.stat(path).st_ino
    start_runner()
    wait_for((base / "read").exists, timeout=60)
    (claimed,) = [p for p in spool.running.glob("*/submitted.yaml") if os.stat(p).st_ino == inode]
    as_member("sh", "-c", f"printf 'output: stolen/chosen-by-member.txt\\n' >> {claimed}")
    (base / "release").touch()
    wait_for(lambda: bool(entries(spool, "done") or entries(spool, "failed")), timeout=90)
    (entry,) = entries(spool, "done") or entries(spool, "failed")
    state = "done" if entries(spool, "done") else "failed"
    copy = (spool.root / state / entry / "job.yaml").read_bytes()
    assert not (spool.root / "output" / "stolen" / "chosen-by-member.txt").exists(), (
        f"published where another member chose; the rendered copy is {copy!r}"
    )


def test_a_secret_file_owned_by_a_member_is_refused(spool: SpoolLayout) -> None:
    """Item 11, new example: the secret checks look at the mode and the group only, never
    at the owner. A 0600 token file owned by a spool-group member (planted at the configured
    path, e.g. in a directory the member can write, or reached through a symlink, which the
    reader follows on purpose) is accepted: its owner knows, and can change, serve's token
    or a webhook's HMAC key. Expected: refused unless owned by the runner's uid or root."""
    from spoolrender.errors import ConfigError
    from spoolrender.secret_file import read_secret_line

    home = spool.root.parent / "member-home"
    home.mkdir()
    os.chown(home, MEMBER_UID, -1)
    token = home / "token"
    as_member("sh", "-c", f"umask 077 && printf 'chosen-by-the-member-0123456789\\n' > {token}")
    assert os.stat(token).st_uid == MEMBER_UID and os.stat(token).st_mode & 0o777 == 0o600
    with pytest.raises(ConfigError):
        read_secret_line(token, f"serve_token_file {token}", "anyone with it can pause the spool", spool.root)


def test_the_private_copy_does_not_widen_who_may_read_a_job(spool: SpoolLayout, start_runner: Start) -> None:
    """Class A side effect: the copy is made 0444 whatever the submitted file's mode. A
    member who drops a 0600 job (its props hold a customer's data or an API key; a root
    runner reads it anyway) finds it readable by EVERY local user in ``running/`` and, for
    good, ``done/<job>/job.yaml`` (the spool is 2755, job directories 0755). Expected: the
    copy is no more readable than the submitted file was (e.g. 0400 + the submitter's group
    bits, or 0440 of the spool's group when the original was group-readable)."""
    home = spool.root.parent / "member-home"
    home.mkdir()
    os.chown(home, MEMBER_UID, -1)
    secret = "renderer: command\ncommand: props\nprops: {api_key: s3cr3t-of-the-member}\n"
    part = home / "private.yaml"
    as_member("sh", "-c", f"umask 077 && printf '{secret}' > {part} && mv {part} {spool.incoming}/private.yaml")
    os.utime(spool.incoming / "private.yaml", (1, 1))
    assert os.stat(spool.incoming / "private.yaml").st_mode & 0o077 == 0
    assert start_runner("--drain").wait(timeout=120) is not None
    (entry,) = entries(spool, "done") or entries(spool, "failed")
    state = "done" if entries(spool, "done") else "failed"
    copy = spool.root / state / entry / "job.yaml"
    # uid 1 (daemon): a local user who is not in the spool's group at all.
    outsider = subprocess.run(
        ["setpriv", "--reuid=1", "--regid=1", "--clear-groups", "cat", str(copy)], capture_output=True, text=True
    )
    assert "s3cr3t" not in outsider.stdout, f"a non-member read the 0600 job via {state}/{entry}/job.yaml"
