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

import pytest
import yaml
from invariants import audit

from spoolrender.spool.layout import init_spool

RENDER_PROPS = Path(__file__).resolve().parent.parent / "programs" / "render_props.py"
CMD = [sys.executable, "-m", "spoolrender.cli"]
OK = "renderer: command\ncommand: props\n"
# Planted in files whose content no reason, record or log line may repeat.
SECRET = "SECRET-8c1d-do-not-echo"


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
    # Duplicate keys: the later value would silently win (issue 12 item 11), at any depth.
    "twice-id.yaml": (OK.encode() + b"id: first\nid: second\n", "failed", "duplicate key 'id' (first at line 3)"),
    "twice-nested.yaml": (
        OK.encode() + b"props:\n  scene:\n    title: a\n    title: b\n",
        "failed",
        "line 6, column 5: duplicate key 'title' (first at line 5)",
    ),
    "twice-flow.yaml": (OK.encode() + b"props: {a: 1, b: [{c: 1, c: 2}]}\n", "failed", "duplicate key 'c'"),
    "twice-quoted.yaml": (b'renderer: command\ncommand: props\n"command": props\n', "failed", "duplicate key"),
    "merge-key.yaml": (OK.encode() + b"props: {<<: {a: 1}, b: 2}\n", "failed", "merge keys (<<) are not allowed"),
    # Reasons never quote the file's content (issue 12 item 14): see SECRET below.
    "passwd-copy.yaml": (
        f"{SECRET}:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n".encode(),
        "failed",
        "expected a YAML mapping at the top, got string at line 1, column 1",
    ),
    "secret-list.yaml": (f"- {SECRET}\n- two\n".encode(), "failed", "got list at line 1, column 1"),
    "secret-flow.yaml": (f"[{SECRET}, 1]\n".encode(), "failed", "got list at line 1, column 1"),
    "secret-number.yaml": (b"\n\n   12345\n", "failed", "got integer at line 3, column 4"),
    "secret-syntax.yaml": (f"a: b\n{SECRET}: [unclosed\n".encode(), "failed", "not valid YAML: line 3"),
    "secret-quote.yaml": (f"a: '{SECRET}\n".encode(), "failed", "not valid YAML: line 2"),
    "secret-tag.yaml": (f"a: !{SECRET} x\n".encode(), "failed", "line 1, column 4: unsupported tag"),
    "secret-int.yaml": (OK.encode() + f"timeout: !!int {SECRET}\n".encode(), "failed", "line 3, column 10"),
    "secret-float.yaml": (OK.encode() + f"priority: !!float {SECRET}\n".encode(), "failed", "cannot build"),
    "secret-date.yaml": (OK.encode() + b"not_before: !!timestamp 2026-02-30\n", "failed", "line 3, column 13"),
    "secret-binary.yaml": (OK.encode() + f"props: {{x: !!binary {SECRET}}}\n".encode(), "failed", "not valid"),
    "secret-escape.yaml": (f'a: "{SECRET} \\q"\n'.encode(), "failed", "unknown escape character"),
    # Spool-level caps (issue 12 item 15).
    "timeout-over-cap.yaml": (job(timeout=86400), "failed", "over this spool's limit of 21600 s"),
    "attempts-over-cap.yaml": (job(max_attempts=100), "failed", "over this spool's limit of 10 (max_job_attempts)"),
    # The output suffix becomes {output}'s: letters and digits only (issue 12 item 16).
    "output-shell.yaml": (
        job(output="x.mp4;id;touch pwned;:"),
        "failed",
        "suffix must be 1-16 letters or digits",
    ),
    "output-shell-dir.yaml": (job(output="a;b/x.mp4 $(touch pwned)"), "failed", "suffix"),
    "output-suffix-space.yaml": (job(output="clip.mp 4"), "failed", "suffix"),
    "output-trailing-dot.yaml": (job(output="clip."), "failed", "suffix"),
    "output-odd-dir.yaml": (job(output="a b;c/$(x)/clip.mkv"), "done", ""),
    # Default ids from file names are unique (issue 12 item 12).
    "レポート.yaml": (OK.encode(), "done", ""),
    "請求書.yaml": (OK.encode(), "done", ""),
    "x" * 150 + "-first.yaml": (OK.encode(), "done", ""),
    "x" * 150 + "-second.yaml": (OK.encode(), "done", ""),
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
        assert SECRET not in json.dumps(failure), failure["reason"]
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
    # Every file meant for done/ got a done/ entry of its own: no two share a derived id.
    assert len(done) == sum(where == "done" for _, where, _ in CASES.values())
    assert SECRET not in proc.stderr
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
        deadline = time.monotonic() + 60
        while not os.listdir(layout.done) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.listdir(layout.failed) == []
        assert (layout.root / "output" / "slow-upload.mp4").read_bytes() == b"finally"
    finally:
        runner.terminate()
        runner.wait(timeout=30)


def test_invalid_job_is_filed_under_its_declared_id_without_touching_reservations(tmp_path: Path) -> None:
    """Issue 13 item 8 and issue 12 item 12, end to end through a real drain.

    A job that fails validation is filed (and found by `show`) under its readable `id:`;
    it neither takes nor releases the reservation of the job that holds that id. A
    reason about an id derived from a file name says so instead of blaming an `id:` field.
    """
    layout = init_spool(tmp_path / "spool")
    config = {
        "settle_seconds": 0, "slots": 1, "max_attempts": 1,
        "commands": {"props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"]},
    }  # fmt: skip
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    drain = [*CMD, "run", "--drain", "--spool", str(layout.root)]

    (layout.incoming / "held.yaml").write_bytes(job(id="held", output="held.mp4"))
    (layout.incoming / "clip.yaml").write_bytes(OK.encode())
    proc = subprocess.run(drain, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    held_uid = os.readlink(layout.ids / "held")

    (layout.incoming / "upload-7.yaml").write_bytes(OK.encode() + b"id: tester-typo\ntimout: 5\n")
    (layout.incoming / "upload-8.yaml").write_bytes(OK.encode() + b"id: held\npriority: high\n")
    (layout.incoming / "upload-9.yaml").write_bytes(OK.encode() + b"id: 'not an id'\nrerun: maybe\n")
    (layout.incoming / "clip.yml").write_bytes(OK.encode())  # same derived id as clip.yaml
    proc = subprocess.run(drain, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]

    failed = {entry.rsplit(".", 1)[0]: entry for entry in os.listdir(layout.failed)}
    assert sorted(failed) == ["clip", "held", "tester-typo", "upload-9"], failed
    typo = json.loads((layout.failed / failed["tester-typo"] / "failure.json").read_text())
    assert typo["id"] == "tester-typo" and "field 'timout': unknown field" in typo["reason"]
    # The invalid job under "held" neither took nor released the done job's reservation.
    assert os.readlink(layout.ids / "held") == held_uid
    assert not (layout.ids / "tester-typo").exists()
    clip = json.loads((layout.failed / failed["clip"] / "failure.json").read_text())
    assert clip["reason"].startswith("id from the file name 'clip.yml': 'clip' was already rendered"), clip

    show = subprocess.run([*CMD, "show", "tester-typo", "--spool", str(layout.root)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert show.returncode == 0, show.stderr
    assert "failed" in show.stdout and "timout" in show.stdout

    # A valid job asking for "held" again is still refused: the reservation stands.
    (layout.incoming / "again.yaml").write_bytes(job(id="held", output="again.mp4"))
    proc = subprocess.run(drain, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr[-2000:]
    again = [e for e in os.listdir(layout.failed) if e.startswith("held.") and e != failed["held"]]
    reason = json.loads((layout.failed / again[0] / "failure.json").read_text())["reason"]
    assert reason.startswith("field 'id': 'held' was already rendered"), reason
    assert os.readlink(layout.ids / "held") == held_uid


REMOTION = Path(__file__).resolve().parents[2] / "remotion"


@pytest.mark.remotion
@pytest.mark.skipif(
    not (REMOTION / "node_modules" / "@remotion" / "renderer").is_dir() or not Path("/usr/bin/chromium").exists(),
    reason="remotion/node_modules or Debian chromium missing: run scripts/setup.sh",
)
def test_render_size_caps_stop_a_render_before_its_first_frame(tmp_path: Path, sample_bundles: Path) -> None:
    """Issue 12 item 15: props and scale that make a composition huge (Tiny with a
    billion frames, scale past the pixel budget) fail for good, named, without retries."""
    layout = init_spool(tmp_path / "spool")
    config = {
        "settle_seconds": 0, "slots": 1, "max_attempts": 3, "remotion_project": str(REMOTION),
        "cache_dir": str(sample_bundles), "max_job_frame_pixels": 100_000,
    }  # fmt: skip
    (layout.root / "spoolrender.yaml").write_text(yaml.safe_dump(config))
    tiny = {"composition": "Tiny"}
    (layout.incoming / "endless.yaml").write_bytes(yaml.safe_dump({**tiny, "props": {"frames": 10**9}}).encode())
    (layout.incoming / "wide.yaml").write_bytes(yaml.safe_dump({**tiny, "settings": {"scale": 4}}).encode())
    (layout.incoming / "fits.yaml").write_bytes(yaml.safe_dump({**tiny, "settings": {"scale": 2}}).encode())
    proc = subprocess.run([*CMD, "run", "--drain", "--spool", str(layout.root)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert [e.split(".")[0] for e in os.listdir(layout.done)] == ["fits"]
    reasons = {}
    for entry in os.listdir(layout.failed):
        failure = json.loads((layout.failed / entry / "failure.json").read_text())
        assert failure["kind"] == "too-large" and failure["attempts"] == 1, failure
        reasons[entry.split(".")[0]] = failure["reason"]
    assert (
        reasons["endless"] == "the render has 1,000,000,000 frames, over this spool's limit of 108,000 (max_job_frames)"
    )
    assert reasons["wide"] == (
        "a frame of 640x360 pixels (the composition's 160x90 at scale 4) is 230,400 pixels, over this spool's "
        "limit of 100,000 (max_job_frame_pixels); lower settings.scale or the composition's size"
    )
    out = layout.root / "output"
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["fits.mp4"]
