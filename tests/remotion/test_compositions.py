"""`spoolrender compositions` and submit's props check, against the real remotion/ project.

The listing is real: the project is bundled, the bundle opened in Debian's Chromium by
the project's own @remotion/renderer, and the zod schemas read from the page. One spool
and one bundle cache serve the whole module (a bundle takes minutes on a busy host).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.checkout import REMOTION, REMOTION_MARKS
from support.processes import spoolrender_cmd
from support.spool_jobs import write_spool_config

from spoolrender.compositions import LISTING_FILE, cached_compositions
from spoolrender.spool.layout import SpoolLayout, init_spool

pytestmark = REMOTION_MARKS


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory, sample_bundles: Path) -> tuple[SpoolLayout, Path, dict[str, Any]]:
    """A spool on remotion/ and its `compositions --json` document (listed once)."""
    root = tmp_path_factory.mktemp("compositions")
    layout = init_spool(root / "spool")
    cache = sample_bundles
    write_spool_config(layout, {"remotion_project": str(REMOTION), "cache_dir": str(cache)})
    proc = run("compositions", "--json", layout=layout, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return layout, cache, json.loads(proc.stdout)


def run(
    *args: str, layout: SpoolLayout, timeout: float = 300, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        spoolrender_cmd(*args, "--spool", str(layout.root)),
        input=stdin, capture_output=True, timeout=timeout, check=False,
    )  # fmt: skip
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def test_lists_every_composition_with_size_timing_and_default_props(
    listed: tuple[SpoolLayout, Path, dict[str, Any]],
) -> None:
    _, _, document = listed
    assert document["project"] == str(REMOTION)
    by_id = {c["id"]: c for c in document["compositions"]}
    assert sorted(by_id) == ["DataRecap", "Failing", "Tiny", "TitleCard"]
    title = by_id["TitleCard"]
    # calculateMetadata ran for the default props (seconds: 3 at 30 fps).
    assert (title["width"], title["height"], title["fps"], title["duration_in_frames"]) == (1280, 720, 30, 90)
    assert isinstance(title["fps"], int)
    assert title["duration_seconds"] == 3
    assert title["default_props"]["title"] == "spoolrender"
    tiny = by_id["Tiny"]
    assert (tiny["width"], tiny["height"], tiny["duration_in_frames"]) == (160, 90, 12)
    assert by_id["Failing"]["default_props"] == {"atFrame": 0, "reason": "requested by test"}


def test_zod_schemas_become_json_schemas_and_others_have_none(
    listed: tuple[SpoolLayout, Path, dict[str, Any]],
) -> None:
    _, _, document = listed
    by_id = {c["id"]: c for c in document["compositions"]}
    recap = by_id["DataRecap"]["props_schema"]
    assert recap["type"] == "object"
    assert "additionalProperties" not in recap  # a plain z.object strips other keys: a job may give them
    items = recap["properties"]["items"]
    assert (items["type"], items["minItems"], items["maxItems"]) == ("array", 1, 12)
    assert items["items"]["properties"]["value"]["type"] == "number"
    assert by_id["TitleCard"]["props_schema"]["properties"]["title"]["minLength"] == 1
    for plain in ("Tiny", "Failing"):  # no <Composition schema>: nothing to show, nothing to excuse
        assert by_id[plain]["props_schema"] is None
        assert by_id[plain]["schema_note"] is None


def test_human_listing_teaches_what_to_write(listed: tuple[SpoolLayout, Path, dict[str, Any]]) -> None:
    layout, _, _ = listed
    proc = run("compositions", layout=layout)  # from the cached listing: no browser this time
    assert proc.returncode == 0, proc.stderr
    assert "DataRecap  1280x720  30 fps  90 frames (3.00 s)" in proc.stdout
    assert "items: array, default" in proc.stdout
    assert "seconds: number, default 3 (exclusiveMinimum 0, maximum 600)" in proc.stdout
    assert "(no other props)" not in proc.stdout  # z.object, not z.strictObject
    assert "Tiny  160x90" in proc.stdout
    assert "props schema: none (the composition declares no schema" in proc.stdout


def job(composition: str, props: dict[str, Any]) -> bytes:
    return yaml.safe_dump({"composition": composition, "props": props, "output": "x.mp4"}).encode()


def test_submit_refuses_props_the_schema_rejects(listed: tuple[SpoolLayout, Path, dict[str, Any]]) -> None:
    layout, cache, _ = listed
    assert (cache / "bundles").is_dir() and list((cache / "bundles").glob(f"*/{LISTING_FILE}"))
    # Its zod 4 z.object is called in the bundle's page: "colour", a key it does not know
    # (it strips it), is no problem.
    bad = {"items": [{"label": "Mon", "value": -3}], "colour": "#fff", "seconds": 0}
    proc = run("submit", "-", "--name", "bad.yaml", layout=layout, stdin=job("DataRecap", bad))
    assert proc.returncode == 1
    for expected in ("field 'props': props.items[0].value: Too small", "field 'props': props.seconds: Too small"):
        assert expected in proc.stderr, proc.stderr
    assert "colour" not in proc.stderr
    assert not (layout.incoming / "bad.yaml").exists()
    # A still past the end the listing knows (Tiny: 12 frames, its default props).
    late = yaml.safe_dump({"composition": "Tiny", "output": "late.png", "still": {"frame": 12}}).encode()
    past = run("submit", "-", "--name", "late.yaml", layout=layout, stdin=late)
    assert past.returncode == 1 and "field 'still': frame 12 is past the end of Tiny (12 frames: 0-11)" in past.stderr
    unknown = run("submit", "-", "--name", "typo.yaml", layout=layout, stdin=job("DataRecapp", {}))
    assert unknown.returncode == 1
    assert "'DataRecapp' is not a composition of the project (it has: DataRecap, Failing, Tiny, TitleCard)" in (
        unknown.stderr
    )


def test_submit_accepts_valid_props_and_skips_the_check_on_request(
    listed: tuple[SpoolLayout, Path, dict[str, Any]],
) -> None:
    layout, _, _ = listed
    good = run("submit", "-", "--name", "good.yaml", layout=layout, stdin=job("DataRecap", {"unit": "kg"}))
    assert good.returncode == 0, good.stderr
    plain = run("submit", "-", "--name", "tiny.yaml", layout=layout, stdin=job("Tiny", {"anything": [1, 2]}))
    assert plain.returncode == 0, plain.stderr  # no schema: the composition decides at render time
    skipped = run(
        "submit", "-", "--name", "skipped.yaml", "--no-props-check",
        layout=layout, stdin=job("DataRecap", {"seconds": -1}),
    )  # fmt: skip
    assert skipped.returncode == 0, skipped.stderr
    last = yaml.safe_dump({"composition": "Tiny", "output": "last.png", "still": {"frame": 11}}).encode()
    still = run("submit", "-", "--name", "last.yaml", layout=layout, stdin=last)
    assert still.returncode == 0, still.stderr
    assert sorted(p.name for p in layout.incoming.iterdir()) == ["good.yaml", "last.yaml", "skipped.yaml", "tiny.yaml"]


def test_a_changed_project_has_no_listing_until_listed_again(
    listed: tuple[SpoolLayout, Path, dict[str, Any]], tmp_path: Path
) -> None:
    """The listing belongs to the bundle of the project's content: a project that changed
    since (here: a copy with one more source file) is not checked against a stale one."""
    _, cache, _ = listed
    assert cached_compositions(REMOTION, cache) is not None
    copy = tmp_path / "project"
    copy.mkdir()
    for name in ("package.json", "package-lock.json"):
        (copy / name).write_bytes((REMOTION / name).read_bytes())
    (copy / "node_modules").symlink_to(REMOTION / "node_modules")
    (copy / "src").symlink_to(REMOTION / "src")
    assert cached_compositions(copy, cache) is None
    assert cached_compositions(tmp_path / "missing", cache) is None


SCHEMAS_PROJECT: dict[str, str | bytes] = {
    "src/index.ts": "import {registerRoot} from 'remotion';\nimport {Root} from './Root';\nregisterRoot(Root);\n",
    "src/Root.tsx": """
import {AbsoluteFill, Composition, Folder} from 'remotion';
import {z} from 'zod';
import {z as z3} from 'zod/v3';
const Blank = () => <AbsoluteFill style={{background: 'black'}} />;
export const Root = () => (
  <Folder name="nested">
    <Composition id="Legacy" component={Blank} schema={z3.object({n: z3.number()})}
      defaultProps={{n: 1}} width={32} height={32} fps={25} durationInFrames={5} />
    <Composition id="Dated" component={Blank} schema={z.object({when: z.date()})}
      defaultProps={{when: new Date(0)}} width={32} height={32} fps={25} durationInFrames={5} />
    <Composition id="Modern" component={Blank} schema={z.object({n: z.number().int(), pace: z.enum(['fast', 'slow'])})}
      defaultProps={{n: 1, pace: 'fast'}} width={32} height={32} fps={25} durationInFrames={5} />
  </Folder>
);
""",
}


def test_schemas_that_cannot_be_converted_say_why(tmp_path: Path) -> None:
    """zod 3 schemas (here through zod 4's zod/v3) have no converter in the page, and a
    zod 4 schema with a type JSON cannot express has none either: each is listed without
    a schema and with the reason; a composition inside a <Folder> is found too."""
    from support.remotion_projects import make_project, remotion_deps

    project = make_project(tmp_path / "schemas", SCHEMAS_PROJECT, REMOTION / "node_modules", remotion_deps("4.0.529"))
    layout = init_spool(tmp_path / "spool")
    write_spool_config(layout, {"remotion_project": str(project), "cache_dir": str(tmp_path / "cache")})
    proc = run("compositions", "--json", layout=layout, timeout=900)
    assert proc.returncode == 0, proc.stderr
    by_id = {c["id"]: c for c in json.loads(proc.stdout)["compositions"]}
    assert by_id["Legacy"]["props_schema"] is None
    assert by_id["Legacy"]["schema_note"].startswith("a zod 3 schema")
    assert by_id["Dated"]["props_schema"] is None
    assert by_id["Dated"]["schema_note"].startswith("the schema cannot be expressed as JSON Schema")
    assert by_id["Modern"]["props_schema"]["properties"]["n"]["type"] == "integer"
    assert by_id["Modern"]["fps"] == 25
    # Shown or not, a schema is called on the props (tests/remotion/test_props_validation.py).
    assert by_id["Legacy"]["has_schema"] and by_id["Dated"]["has_schema"]
    shown = run("compositions", layout=layout)  # an enum prop is its values, not "string"
    assert '  pace: one of "fast", "slow", default "fast"' in shown.stdout, shown.stdout


FETCHING_PROJECT: dict[str, str | bytes] = {
    "src/index.ts": SCHEMAS_PROJECT["src/index.ts"],
    "src/Root.tsx": """
import {AbsoluteFill, Composition} from 'remotion';
const Blank = () => <AbsoluteFill style={{background: 'black'}} />;
// Its metadata comes from a host that cannot be reached (port 9: refused at once).
const fetchMetadata = async () => {
  await fetch('http://127.0.0.1:9/data.json');
  return {};
};
export const Root = () => (
  <Composition id="Data" component={Blank} calculateMetadata={fetchMetadata}
    width={32} height={32} fps={25} durationInFrames={5} />
);
""",
}


def test_a_failed_listing_is_said_by_submit_and_blames_no_composition(tmp_path: Path) -> None:
    from support.remotion_projects import make_project, remotion_deps

    project = make_project(tmp_path / "fetching", FETCHING_PROJECT, REMOTION / "node_modules", remotion_deps("4.0.529"))
    layout = init_spool(tmp_path / "spool")
    write_spool_config(layout, {"remotion_project": str(project), "cache_dir": str(tmp_path / "cache")})
    listing = run("compositions", layout=layout, timeout=900)
    assert listing.returncode != 0
    # "Failed to fetch" names what it asked for.
    assert "listing the compositions failed: " in listing.stderr and "http://127.0.0.1:9/data.json" in listing.stderr
    submitted = run("submit", "-", "--name", "d.yaml", layout=layout, stdin=job("Data", {}))
    assert submitted.returncode == 0, submitted.stderr  # what may render is never refused
    assert "warning: composition and props not checked: listing the project's compositions failed: " in (
        submitted.stderr
    )
    assert "http://127.0.0.1:9/data.json" in submitted.stderr and "not a composition" not in submitted.stderr
