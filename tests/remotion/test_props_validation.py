"""Props checked with the project's own zod schema (zod 3 and 4), at submit and in the runner.

One project, built here, holds a zod 4 and a zod 3 composition (zod 3 through zod 4's
``zod/v3``: the zod 3 implementation itself, which starters pinning ``zod@3`` run too),
each with a refinement no JSON Schema expresses and default props with a key the plain
``z.object`` does not know (it strips it: accepted, as by a Three.js starter). The
components throw on props that break their schema, so a job whose props reached a frame
fails as `component-error`, not `invalid-props`. One spool and bundle serve the module.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from support.checkout import REMOTION, REMOTION_MARKS
from support.remotion_projects import drain, make_project, record, remotion_deps
from support.spool_jobs import drop, entries, write_spool_config

from remotion.test_compositions import run
from spoolrender.spool.layout import SpoolLayout, init_spool

pytestmark = REMOTION_MARKS

PROJECT: dict[str, str | bytes] = {
    "src/index.ts": "import {registerRoot} from 'remotion';\nimport {Root} from './Root';\nregisterRoot(Root);\n",
    "src/Root.tsx": """
import {AbsoluteFill, Composition} from 'remotion';
import {z} from 'zod';
import {z as z3} from 'zod/v3';
const hex = (s: string) => s.startsWith('#');
const scene = z.object({titleColor: z.string().refine(hex, 'a #colour'), size: z.number().min(1)});
const phone = z3.object({phoneColor: z3.string().refine(hex, 'a #colour'), count: z3.number().int()});
const Scene = ({titleColor}: {titleColor: unknown}) => {
  if (typeof titleColor !== 'string') throw new Error('a frame rendered with bad props');
  return <AbsoluteFill style={{background: titleColor}} />;
};
// A plain z.object (unknown keys stripped: accepted), a field with a schema default, and an
// async refinement (safeParse throws on it; safeParseAsync, as zod's parseAsync, accepts).
const loose = z.object({label: z.string(), speed: z.number().default(1),
  code: z.string().refine(async (s) => s.length > 0, 'not empty')});
const Loose = () => <AbsoluteFill style={{background: '#0000ff'}} />;
// A refinement with a bug of its own: it throws (the CLI renders any props).
const buggy = z.object({n: z.number().refine((n) => (null as unknown as number[]).includes(n))});
const Phone = ({phoneColor}: {phoneColor: unknown}) => {
  if (typeof phoneColor !== 'string') throw new Error('a frame rendered with bad props');
  return <AbsoluteFill style={{background: phoneColor}} />;
};
export const Root = () => (
  <>
    <Composition id="Scene" component={Scene} schema={scene} width={16} height={16} fps={10}
      durationInFrames={2} defaultProps={{titleColor: '#ff0000', size: 2, camera: {fov: 40}}} />
    <Composition id="Phone" component={Phone} schema={phone} width={16} height={16} fps={10}
      durationInFrames={2} defaultProps={{phoneColor: '#00ff00', count: 1, device: 'pixel'}} />
    <Composition id="Loose" component={Loose} schema={loose} width={16} height={16} fps={10}
      durationInFrames={2} defaultProps={{label: 'x', code: 'a'}} />
    <Composition id="Buggy" component={Loose} schema={buggy} width={16} height={16} fps={10}
      durationInFrames={2} defaultProps={{n: 1}} />
  </>
);
""",
}

BAD: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "Scene": ({"titleColor": 12, "size": 0}, ("props.titleColor: ", "props.size: ")),
    "Phone": ({"phoneColor": "green", "count": 1.5}, ("props.phoneColor: a #colour", "props.count: ")),
}


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> tuple[SpoolLayout, dict[str, Any]]:
    """A spool on the project and its `compositions --json` document (bundled and listed once)."""
    root = tmp_path_factory.mktemp("props")
    project = make_project(root / "project", PROJECT, REMOTION / "node_modules", remotion_deps("4.0.529"))
    layout = init_spool(root / "spool")
    write_spool_config(layout, {"remotion_project": str(project), "cache_dir": str(root / "cache"), "slots": 1})
    proc = run("compositions", "--json", layout=layout, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return layout, {c["id"]: c for c in json.loads(proc.stdout)["compositions"]}


def job(composition: str, output: str, props: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"composition": composition, "output": output, **({"props": props} if props else {})}


def test_listing_knows_both_schemas_and_shows_zod_4s(listed: tuple[SpoolLayout, dict[str, Any]]) -> None:
    layout, by_id = listed
    assert by_id["Scene"]["has_schema"] and by_id["Phone"]["has_schema"]
    assert by_id["Scene"]["props_schema"]["properties"]["size"]["minimum"] == 1
    assert by_id["Phone"]["props_schema"] is None
    assert (
        by_id["Phone"]["schema_note"].startswith("a zod 3 schema")
        and "still checked with it" in (by_id["Phone"]["schema_note"])
    )
    shown = run("compositions", layout=layout)
    assert "props schema: not shown (a zod 3 schema" in shown.stdout, shown.stdout


@pytest.mark.parametrize("composition", ["Scene", "Phone"])
def test_submit_refuses_what_the_schema_refuses_by_path(
    listed: tuple[SpoolLayout, dict[str, Any]], composition: str
) -> None:
    layout, _ = listed
    props, paths = BAD[composition]
    name = f"bad-{composition}.yaml"
    data = yaml.safe_dump(job(composition, "x.mp4", props)).encode()
    proc = run("submit", "-", "--name", name, layout=layout, stdin=data)
    assert proc.returncode == 1, proc.stderr
    for path in paths:
        assert f"field 'props': {path}" in proc.stderr, proc.stderr
    assert not (layout.incoming / name).exists()


def test_submit_accepts_what_the_schema_accepts(listed: tuple[SpoolLayout, dict[str, Any]]) -> None:
    """The default props' extra keys, and a job's own, pass: a plain z.object strips them."""
    layout, _ = listed
    jobs = {
        "scene-defaults.yaml": job("Scene", "a.mp4"),
        "phone-extra.yaml": job("Phone", "b.mp4", {"count": 3, "unknownKey": [1, 2]}),
    }
    for name, content in jobs.items():
        proc = run("submit", "-", "--name", name, layout=layout, stdin=yaml.safe_dump(content).encode())
        assert proc.returncode == 0, proc.stderr
        assert "props not checked" not in proc.stderr
    for name in jobs:  # not rendered: the drain of the runner's test renders one such job
        (layout.incoming / name).unlink()


def block(listing: str, composition: str) -> str:
    """``composition``'s lines of the `compositions` text."""
    return listing.split(f"{composition}  ", 1)[1].split("\n\n", 1)[0]


def test_listing_shows_what_a_job_may_give_not_zods_output_type(listed: tuple[SpoolLayout, dict[str, Any]]) -> None:
    """A plain z.object accepts other props (it strips them) and a .default() field need
    not be given: zod's default (output) JSON Schema says neither; its input one does."""
    layout, _ = listed
    shown = run("compositions", layout=layout)
    assert shown.returncode == 0, shown.stderr
    for composition in ("Scene", "Loose"):
        assert "(no other props)" not in block(shown.stdout, composition), shown.stdout
    assert "  speed: number, default 1" in block(shown.stdout, "Loose"), shown.stdout


def test_submit_calls_an_async_refinement(listed: tuple[SpoolLayout, dict[str, Any]]) -> None:
    """safeParse throws on an async refinement; the check must not give up (or refuse)."""
    layout, _ = listed
    good = run("submit", "-", "--name", "loose.yaml", layout=layout,
               stdin=yaml.safe_dump(job("Loose", "l.mp4", {"speed": 2, "extra": 1})).encode())  # fmt: skip
    assert good.returncode == 0 and "props not checked" not in good.stderr, good.stderr
    (layout.incoming / "loose.yaml").unlink()
    bad = run("submit", "-", "--name", "empty.yaml", layout=layout,
              stdin=yaml.safe_dump(job("Loose", "e.mp4", {"code": ""})).encode())  # fmt: skip
    assert bad.returncode == 1 and "field 'props': props.code: not empty" in bad.stderr, bad.stderr


def test_the_runner_fails_bad_props_before_any_frame(listed: tuple[SpoolLayout, dict[str, Any]]) -> None:
    """Dropped straight into incoming/ (no submit): the runner calls the schema before the
    first frame; the good jobs (extra keys included) render."""
    layout, _ = listed
    for composition, (props, _) in BAD.items():
        drop(layout, f"bad-{composition}.yaml", job(composition, f"bad-{composition}.mp4", props))
    drop(layout, "scene-extra.yaml", job("Scene", "good.mp4", {"size": 5, "camera": {"fov": 90}, "more": True}))
    drop(layout, "loose-async.yaml", job("Loose", "loose.mp4", {"label": "y"}))  # an async refinement
    drop(layout, "buggy.yaml", job("Buggy", "buggy.mp4"))  # a schema that throws: not checked, rendered
    drain(layout, expect=3)  # exit status 3: some jobs failed
    for composition, (_, paths) in BAD.items():
        failure = record(layout, "failed", f"bad-{composition}", "failure.json")
        assert failure["kind"] == "invalid-props", failure
        assert failure["attempts"] == 1  # for good: no retry can fix the job file
        assert failure["reason"].startswith(f"Invalid props for {composition}: "), failure
        for path in paths:
            assert path in failure["reason"], failure
        shown = run("show", f"bad-{composition}", layout=layout)
        assert shown.returncode == 0 and all(path in shown.stdout for path in paths), shown.stdout
    assert [e.split(".")[0] for e in entries(layout, "done")] == ["buggy", "loose-async", "scene-extra"]
    outputs = sorted(p.name for p in (layout.root / "output").iterdir() if not p.name.startswith("."))
    assert outputs == ["buggy.mp4", "good.mp4", "loose.mp4"]  # the bad jobs' outputs never existed
