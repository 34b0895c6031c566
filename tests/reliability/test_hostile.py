"""A corpus of hostile and broken job files against one real runner.

Every case must end where it belongs (failed/ with a one-line reason naming the problem,
or done/ for odd but valid files, or left waiting while an upload is still growing), the
runner must never die, and nothing may be written outside the output root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from invariants import audit

from spoolrender.layout import init_spool

RENDER_PROPS = Path(__file__).resolve().parent.parent / "programs" / "render_props.py"
CMD = [sys.executable, "-m", "spoolrender.cli"]
OK = "renderer: command\ncommand: props\n"


def job(**fields: object) -> bytes:
    return yaml.safe_dump({"renderer": "command", "command": "props", **fields}).encode()


# name -> (content, where it must end, a phrase its reason must contain)
CASES: dict[str, tuple[bytes, str, str]] = {
    "empty.yaml": (b"", "failed", "empty, expected a YAML mapping"),
    "blank.yaml": (b"   \n\n", "failed", "empty, expected a YAML mapping"),
    "binary.yaml": (bytes(range(256)) * 4, "failed", "not valid UTF-8"),
    "nul.yaml": (b"renderer: command\x00\n", "failed", "NUL"),
    "latin1.yaml": ("title: caf\xe9\n".encode("latin-1"), "failed", "not valid UTF-8"),
    "truncated.yaml": (b"renderer: command\nprops: {title: [unclosed", "failed", "not valid YAML"),
    "tabs.yaml": (b"renderer: command\n\tcommand: props\n", "failed", "not valid YAML"),
    "list.yaml": (b"- renderer: command\n- command: props\n", "failed", "expected a YAML mapping at the top, got list"),
    "scalar.yaml": (b"just a string\n", "failed", "expected a YAML mapping at the top, got str"),
    "number.yaml": (b"42\n", "failed", "got int"),
    "two-docs.yaml": (OK.encode() + b"---\n" + OK.encode(), "failed", "not valid YAML"),
    "alias.yaml": (b"a: &x {k: 1}\nrenderer: command\ncommand: props\nprops: {b: *x}\n", "failed", "aliases"),
    "laughs.yaml": (
        b"a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        b"d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n",
        "failed",
        "aliases",
    ),
    "deep.yaml": (b"renderer: command\ncommand: props\nprops: " + b"[" * 100 + b"]" * 100 + b"\n", "failed", "nest"),
    "huge.yaml": (OK.encode() + b"# " + b"x" * (2 * 1024 * 1024) + b"\n", "failed", "over the limit"),
    "props-huge.yaml": (job(props={"blob": "y" * (1024 * 1024)}), "failed", "over the limit"),
    "python-tag.yaml": (
        b"renderer: command\ncommand: !!python/object/apply:os.system ['touch /tmp/pwned']\n",
        "failed",
        "not valid YAML",
    ),
    "bad-date.yaml": (job() + b"not_before: 2026-13-45\n", "failed", "not valid YAML"),
    "unknown-field.yaml": (job(colour="red"), "failed", "field 'colour': unknown field"),
    "typo-field.yaml": (job(max_attempt=3), "failed", "field 'max_attempt': unknown field"),
    "bad-id.yaml": (job(id="../../etc/passwd"), "failed", "field 'id'"),
    "id-list.yaml": (job(id=["a"]), "failed", "field 'id'"),
    "bad-renderer.yaml": (job(renderer="shell"), "failed", "field 'renderer'"),
    "not-allowed-cmd.yaml": (job(command="rm"), "failed", "field 'command': expected one of the spool config's"),
    "cmd-list.yaml": (job(command=["rm", "-rf", "/"]), "failed", "field 'command'"),
    "props-list.yaml": (job(props=[1, 2]), "failed", "field 'props'"),
    "props-date.yaml": (b"renderer: command\ncommand: props\nprops: {when: 2026-01-01}\n", "failed", "JSON data"),
    "props-nan.yaml": (b"renderer: command\ncommand: props\nprops: {x: .nan}\n", "failed", "JSON data"),
    "output-dotdot.yaml": (job(output="../escape.mp4"), "failed", "field 'output'"),
    "output-deep-dotdot.yaml": (job(output="a/../../escape.mp4"), "failed", "field 'output'"),
    "output-abs.yaml": (job(output="/tmp/escape.mp4"), "failed", "field 'output'"),
    "output-hidden.yaml": (job(output=".spoolrender-tmp/x.mp4"), "failed", "field 'output'"),
    "output-backslash.yaml": (job(output="..\\..\\x.mp4"), "failed", "field 'output'"),
    "output-int.yaml": (job(output=5), "failed", "field 'output'"),
    "output-via-symlink.yaml": (job(output="evil/x.mp4"), "failed", "symlink or not a directory"),
    "max-attempts-str.yaml": (job(max_attempts="3"), "failed", "field 'max_attempts'"),
    "max-attempts-bool.yaml": (job(max_attempts=True), "failed", "field 'max_attempts'"),
    "max-attempts-zero.yaml": (job(max_attempts=0), "failed", "field 'max_attempts'"),
    "timeout-neg.yaml": (job(timeout=-1), "failed", "field 'timeout'"),
    "timeout-inf.yaml": (b"renderer: command\ncommand: props\ntimeout: .inf\n", "failed", "field 'timeout'"),
    "timeout-huge.yaml": (
        b"renderer: command\ncommand: props\ntimeout: " + b"9" * 400 + b"\n",
        "failed",
        "field 'timeout'",
    ),
    "priority-float.yaml": (job(priority=1.5), "failed", "field 'priority'"),
    "priority-big.yaml": (job(priority=10**9), "failed", "field 'priority'"),
    "not-before-junk.yaml": (job(not_before="tomorrow"), "failed", "field 'not_before'"),
    "rerun-str.yaml": (job(rerun="yes please"), "failed", "field 'rerun'"),
    "settings-cmd.yaml": (job(settings={"codec": "h264"}), "failed", "field 'settings'"),
    "fallback-str.yaml": (job(fallback="lower"), "failed", "field 'fallback'"),
    "all-wrong.yaml": (
        job(id=1, command=2, props=3, output=4, max_attempts="x", timeout="y", priority="z"),
        "failed",
        "field 'timeout'",
    ),
    "exits-65.yaml": (job(props={"exit": 65, "message": "title missing"}), "failed", "status 65: title missing"),
    "dup-a.yaml": (job(id="same-id", output="dup-a.mp4"), "done", ""),
    "dup-b.yaml": (job(id="same-id", output="dup-b.mp4", priority=-1), "failed", "'same-id' was already rendered"),
    "name with spaces.yaml": (OK.encode(), "done", ""),
    "ünïcødé.yaml": (OK.encode(), "done", ""),
    "new\nline.yaml": (OK.encode(), "done", ""),
    "no-extension": (OK.encode(), "done", ""),
}
SPECIAL = ("symlink.yaml", "fifo.yaml", "dir.yaml", "dangling.yaml")


def test_hostile_corpus_ends_where_it_belongs(tmp_path: Path) -> None:
    layout = init_spool(tmp_path / "spool")
    config = {
        "settle_seconds": 0.5, "slots": 2, "max_attempts": 1,
        "commands": {"props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"]},
    }  # fmt: skip
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("untouched")
    output = layout.root / "output"
    output.mkdir()
    (output / "evil").symlink_to(outside)
    secret = tmp_path / "secret.yaml"
    secret.write_text(OK)

    def before_tree() -> list[str]:
        skip = (layout.root / "running", layout.root / "retry", layout.root / "done", layout.root / "failed")
        out = []
        for dirpath, dirnames, filenames in os.walk(tmp_path):
            if Path(dirpath) in skip or layout.private in Path(dirpath).parents or Path(dirpath) == layout.private:
                dirnames[:] = []
                continue
            if Path(dirpath) == output or output in Path(dirpath).parents:
                continue
            out += [os.path.join(dirpath, f) for f in filenames]
        return sorted(out)

    for name, (data, _, _) in CASES.items():
        (layout.incoming / name).write_bytes(data)
    os.symlink(secret, layout.incoming / "symlink.yaml")
    os.symlink(tmp_path / "nowhere", layout.incoming / "dangling.yaml")
    os.mkfifo(layout.incoming / "fifo.yaml")
    (layout.incoming / "dir.yaml").mkdir()
    old = time.time() - 60
    for name in CASES:
        os.utime(layout.incoming / name, (old, old))
    files_before = [f for f in before_tree() if "incoming" not in f]

    proc = subprocess.run([*CMD, "run", "--drain", "--spool", str(layout.root)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-2000:]  # failures happened; the runner did not die
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]

    reasons: dict[str, str] = {}
    for entry in os.listdir(layout.failed):
        failure = json.loads((layout.failed / entry / "failure.json").read_text())
        assert "\n" not in failure["reason"], failure["reason"]  # one line
        reasons[entry.rsplit(".", 1)[0]] = failure["reason"]
    done = {entry.rsplit(".", 1)[0] for entry in os.listdir(layout.done)}
    handled = 0
    from spoolrender.jobfile import id_from_filename

    misplaced = []
    for name, (_, where, phrase) in CASES.items():
        job_id = "same-id" if name.startswith("dup-") else id_from_filename(name)
        ok = job_id in done if where == "done" else phrase in reasons.get(job_id, "")
        handled += ok
        if not ok:
            misplaced.append(f"{name!r}: {reasons.get(job_id, 'not failed')}")
    assert not misplaced, misplaced
    for name, phrase in (("symlink", "got a symlink"), ("dangling", "got a symlink"), ("fifo", "got a FIFO"),
                         ("dir", "got a directory")):  # fmt: skip
        assert phrase in reasons[name]
        handled += 1
    assert os.listdir(layout.incoming) == []
    assert handled == len(CASES) + len(SPECIAL) >= 40

    # Nothing written outside the output root, nothing read through the symlinks.
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    assert [f for f in before_tree() if "incoming" not in f] == files_before
    assert not Path("/tmp/pwned").exists()
    assert secret.read_text() == OK

    ids = {id_from_filename(n) for n in CASES if not n.startswith("dup-")} | {"same-id"}
    ids |= {n.split(".")[0] for n in SPECIAL}
    result = audit(layout, ids, check_processes=False)
    assert not result.lost and not result.partial_files, result.problems()


def test_growing_upload_waits_then_completes(tmp_path: Path) -> None:
    """A half-uploaded file that does not parse yet is left waiting while it grows."""
    layout = init_spool(tmp_path / "spool")
    config = {
        "settle_seconds": 1.0,
        "commands": {"props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"]},
    }
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    runner = subprocess.Popen([*CMD, "run", "--spool", str(layout.root)], stderr=subprocess.DEVNULL)
    try:
        path = layout.incoming / "slow-upload.yaml"
        text = b"renderer: command\ncommand: props\nprops: {content: finally}\n"
        with open(path, "wb") as fh:  # like scp over a slow link: bytes trickle in
            for i in range(len(text) // 2):
                fh.write(text[i : i + 1])
                fh.flush()
                time.sleep(0.1)
            assert os.listdir(layout.incoming) == ["slow-upload.yaml"]  # never claimed half
            fh.write(text[len(text) // 2 :])
        deadline = time.monotonic() + 20
        while not os.listdir(layout.done) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.listdir(layout.failed) == []
        assert (layout.root / "output" / "slow-upload.mp4").read_bytes() == b"finally"
    finally:
        runner.terminate()
        runner.wait(timeout=30)
