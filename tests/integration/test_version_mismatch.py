"""The "Version mismatch" warning and its fix (worker/project.mjs), read from node_modules
trees of bare package.json files (and the Skia shape's real one): the fix names the packages the
project itself resolves, at the version of the project's own `remotion` command
(@remotion/cli, else the renderer), never a stray ancestor's package or its version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.conformance import SKIA
from support.worker_js import call_worker

OPEN = """
const project = m.openProject(input.dir);
return {remotionVersion: project.remotionVersion, warning: project.versionWarning};
"""
OPEN_AND_CHECK = """
try {
  m.openProject(input.dir).check('@remotion/renderer', '@remotion/bundler');
  return null;
} catch (err) {
  return {kind: err.kind, message: err.message};
}
"""
PREFIX = "Version mismatch (Remotion's CLI warns the same and renders): "


def package(node_modules: Path, name: str, version: str) -> None:
    (node_modules / name).mkdir(parents=True)
    (node_modules / name / "package.json").write_text(json.dumps({"name": name, "version": version}))


def project(dir: Path, declared: dict[str, str], installed: dict[str, str]) -> Path:
    dir.mkdir(parents=True)
    (dir / "package.json").write_text(json.dumps({"name": dir.name, "dependencies": declared}))
    for name, version in installed.items():
        package(dir / "node_modules", name, version)
    return dir


def opened(dir: Path) -> Any:
    return call_worker("project.mjs", OPEN, {"dir": str(dir)})


# As npm installs a starter today: remotion 4.0.541, every @remotion/* at 4.0.529, and
# each of those with its own exactly pinned remotion 4.0.529 nested under it.
MIXED = {
    "remotion": "4.0.541",
    "@remotion/cli": "4.0.529",
    "@remotion/renderer": "4.0.529",
    "@remotion/bundler": "4.0.529",
    "@remotion/studio": "4.0.529",
    "@remotion/compositor-linux-x64-gnu": "4.0.529",
    "@remotion/cli/node_modules/remotion": "4.0.529",
}


def test_the_fix_pins_the_projects_own_packages_to_its_clis_version(tmp_path: Path) -> None:
    # A workspace: its root's node_modules holds another app's old @remotion/player and
    # this app's hoisted, declared @remotion/media-utils.
    root = tmp_path / "workspace"
    package(root / "node_modules", "@remotion/player", "4.0.300")
    package(root / "node_modules", "@remotion/media-utils", "4.0.529")
    app = project(root / "app", {"remotion": "^4.0.0", "@remotion/cli": "^4.0.0", "@remotion/media-utils": "^4.0.0"},
                  MIXED)  # fmt: skip
    fix = (
        "npm install --save-exact @remotion/bundler@4.0.529 @remotion/cli@4.0.529 @remotion/media-utils@4.0.529 "
        "@remotion/renderer@4.0.529 @remotion/studio@4.0.529 remotion@4.0.529"
    )
    assert opened(app) == {
        "remotionVersion": "4.0.541",
        "warning": f"{PREFIX}remotion 4.0.541; @remotion/bundler, @remotion/cli, @remotion/media-utils, "
        f"@remotion/renderer, @remotion/studio 4.0.529; to give every Remotion package one version, run `{fix}`",
    }


def test_a_stray_package_in_an_ancestor_is_no_mismatch(tmp_path: Path) -> None:
    package(tmp_path / "node_modules", "@remotion/player", "4.0.300")  # e.g. ~/node_modules
    aligned = {name: "4.0.529" for name in ("remotion", "@remotion/cli", "@remotion/renderer", "@remotion/bundler")}
    app = project(tmp_path / "app", {"remotion": "4.0.529", "@remotion/cli": "4.0.529"}, aligned)
    assert opened(app) == {"remotionVersion": "4.0.529", "warning": None}


def test_an_old_package_with_a_copy_at_the_clis_version_is_raised_to_it(tmp_path: Path) -> None:
    # @remotion/player 4.0.300 at the top, and a 4.0.529 of it nested under another
    # package: that version exists, so the fix raises the old one, not everything lowered.
    installed = {**MIXED, "remotion": "4.0.529", "@remotion/player": "4.0.300",
                 "@remotion/studio/node_modules/@remotion/player": "4.0.529"}  # fmt: skip
    app = project(tmp_path / "app", {"remotion": "4.0.529", "@remotion/cli": "4.0.529", "@remotion/player": "4.0.300"},
                  installed)  # fmt: skip
    warning = opened(app)["warning"]
    assert warning.startswith(f"{PREFIX}@remotion/bundler, @remotion/cli, @remotion/renderer, @remotion/studio, "
                              "remotion 4.0.529; @remotion/player 4.0.300; ")  # fmt: skip
    assert warning.endswith(
        "run `npm install --save-exact @remotion/bundler@4.0.529 @remotion/cli@4.0.529 @remotion/player@4.0.529 "
        "@remotion/renderer@4.0.529 @remotion/studio@4.0.529 remotion@4.0.529`"
    )


def test_a_lagging_package_is_never_offered_a_version_nothing_shows_it_has(tmp_path: Path) -> None:
    # Issue 22: @remotion/tailwind stops at 4.0.527 on the registry while @remotion/cli is
    # at 4.0.529. No 4.0.529 of it is installed, so the fix cannot know that one exists
    # (ETARGET if it does not): it says so instead of naming @remotion/tailwind@4.0.529.
    installed = {**MIXED, "@remotion/tailwind": "4.0.527",
                 "@remotion/tailwind/node_modules/@remotion/bundler": "4.0.527"}  # fmt: skip
    app = project(tmp_path / "app", {"remotion": "^4.0.0", "@remotion/cli": "^4.0.0", "@remotion/tailwind": "^4.0.0"},
                  installed)  # fmt: skip
    warning = opened(app)["warning"]
    assert "@remotion/tailwind@" not in warning
    assert warning.endswith(
        "to give every Remotion package one version, run `npm install --save-exact @remotion/bundler@4.0.529 "
        "@remotion/cli@4.0.529 @remotion/renderer@4.0.529 @remotion/studio@4.0.529 remotion@4.0.529`; "
        "@remotion/tailwind 4.0.527 has no copy installed at 4.0.529, so whether 4.0.529 exists for it is unknown "
        "here (`npm view @remotion/tailwind versions` lists what the registry has; pin every Remotion package to one "
        "version all of them have)"
    )


def test_pnpms_store_shows_which_versions_exist(tmp_path: Path) -> None:
    # pnpm links packages out of node_modules/.pnpm/<name>@<version>/: the store's entry
    # names are installed versions too.
    installed = {"remotion": "4.0.541", "@remotion/cli": "4.0.529", "@remotion/tailwind": "4.0.527"}
    app = project(tmp_path / "app", dict.fromkeys(installed, "^4.0.0"), installed)
    (app / "pnpm-lock.yaml").write_text("")
    for entry in ("remotion@4.0.529", "@remotion+tailwind@4.0.529_@remotion+bundler@4.0.529"):
        (app / "node_modules" / ".pnpm" / entry).mkdir(parents=True)
    assert opened(app)["warning"].endswith(
        "run `pnpm add --save-exact @remotion/cli@4.0.529 @remotion/tailwind@4.0.529 remotion@4.0.529`"
    )


def test_without_the_cli_the_renderers_version_is_the_fix(tmp_path: Path) -> None:
    installed = {"remotion": "4.0.541", "@remotion/renderer": "4.0.529", "@remotion/bundler": "4.0.529",
                 "@remotion/renderer/node_modules/remotion": "4.0.529"}  # fmt: skip
    app = project(tmp_path / "app", dict.fromkeys(installed, "^4.0.0"), installed)
    (app / "yarn.lock").write_text("")
    assert opened(app)["warning"].endswith(
        "run `yarn add --exact @remotion/bundler@4.0.529 @remotion/renderer@4.0.529 remotion@4.0.529`"
    )


def test_a_major_version_apart_is_refused_with_the_fix(tmp_path: Path) -> None:
    installed = {"remotion": "4.0.529", "@remotion/renderer": "4.0.529", "@remotion/bundler": "3.3.100"}
    app = project(tmp_path / "app", dict.fromkeys(installed, "*"), installed)
    assert call_worker("project.mjs", OPEN_AND_CHECK, {"dir": str(app)}) == {
        "kind": "setup",
        "message": f"{app} has @remotion/bundler 3.3.100 but remotion 4.0.529, a major version apart, which cannot "
        "render: @remotion/bundler 3.3.100 has no copy installed at 4.0.529, so whether 4.0.529 exists for it is "
        "unknown here (`npm view @remotion/bundler versions` lists what the registry has; pin every Remotion package "
        "to one version all of them have)",
    }


@pytest.mark.skipif(not (SKIA.node_modules / ".spoolrender-installed").is_file(),
                    reason="remotion-shapes missing: run scripts/setup.sh --test")  # fmt: skip
def test_skias_project_as_npm_installs_it_is_told_what_is_unknown(tmp_path: Path) -> None:
    # The real tree (scripts/setup.sh --test): @remotion/skia stops at 4.0.508 on the
    # registry, beside remotion and @remotion/cli 4.0.527. No @remotion/skia@4.0.527 is
    # offered (it does not exist: ETARGET), and the rest already share 4.0.527: no command.
    warning = opened(SKIA.write(tmp_path))["warning"]
    assert warning.startswith(f"{PREFIX}@remotion/")
    assert "@remotion/skia@" not in warning and "npm install" not in warning
    assert warning.endswith(
        "to give every Remotion package one version: @remotion/skia 4.0.508 has no copy installed at 4.0.527, so "
        "whether 4.0.527 exists for it is unknown here (`npm view @remotion/skia versions` lists what the registry "
        "has; pin every Remotion package to one version all of them have)"
    )


def test_a_workspace_member_under_yarn_plug_n_play_is_told_to_switch_linkers(tmp_path: Path) -> None:
    # Yarn PnP installs no node_modules and writes .pnp.cjs at the workspace's root only: a
    # member project was told its node_modules is missing and to run `yarn install`, which
    # it had run, and which changes nothing.
    root = tmp_path / "monorepo"
    root.mkdir()
    (root / "package.json").write_text(json.dumps({"name": "monorepo", "private": True, "workspaces": ["apps/*"]}))
    (root / ".pnp.cjs").write_text("")
    (root / "yarn.lock").write_text("")
    app = project(root / "apps" / "video", {"remotion": "4.0.529", "@remotion/cli": "4.0.529"}, {})
    assert call_worker("project.mjs", OPEN_AND_CHECK, {"dir": str(app)}) == {
        "kind": "setup",
        "message": f"{app} uses Yarn Plug'n'Play (the workspace {root}), which spoolrender cannot load Remotion "
        'from: set "nodeLinker: node-modules" in .yarnrc.yml and run yarn install',
    }
