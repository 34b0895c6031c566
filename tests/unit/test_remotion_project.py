"""A user's Remotion project as the runner checks it before starting Node
(spoolrender.renderers.remotion.project), on project trees written here: the install
command its lockfile asks for, the Remotion version Node would load (hoisted workspaces
too), a project that cannot work refused for good naming the fix, and the bundle key: what
changes it (a source, a config, the version) and what does not (node_modules, outputs, a
spool or the bundle cache inside the project)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from spoolrender.errors import RenderError
from spoolrender.renderers.remotion.project import bundle_key, check_project, install_command, remotion_version


def project(root: Path, version: str | None = "4.0.529", *, hoisted: bool = False) -> Path:
    root.mkdir(parents=True)
    (root / "package.json").write_text(json.dumps({"name": root.name, "dependencies": {"remotion": "^4"}}))
    (root / "src").mkdir()
    (root / "src" / "index.ts").write_text("registerRoot(Root);\n")
    if version is not None:
        installed = (root.parent if hoisted else root) / "node_modules" / "remotion"
        installed.mkdir(parents=True)
        (installed / "package.json").write_text(json.dumps({"name": "remotion", "version": version}))
    return root


@pytest.mark.parametrize(
    ("lockfiles", "command"),
    [((), "npm install"), (("package-lock.json",), "npm ci"), (("yarn.lock",), "yarn install"),
     (("bun.lock",), "bun install"), (("pnpm-lock.yaml", "package-lock.json"), "pnpm install")],
)  # fmt: skip
def test_the_install_command_is_the_one_its_lockfile_asks_for(
    tmp_path: Path, lockfiles: tuple[str, ...], command: str
) -> None:
    for name in lockfiles:
        (tmp_path / name).write_text("")
    assert install_command(tmp_path) == command


def test_the_version_is_the_one_node_would_load_hoisted_or_not(tmp_path: Path) -> None:
    assert remotion_version(project(tmp_path / "own", "4.0.529")) == "4.0.529"
    member = project(tmp_path / "workspace" / "packages" / "video", None)
    hoisted = tmp_path / "workspace" / "packages" / "node_modules" / "remotion"
    hoisted.mkdir(parents=True)
    (hoisted / "package.json").write_text(json.dumps({"version": "4.0.400"}))
    assert remotion_version(member) == "4.0.400"
    (member / "node_modules" / "remotion").mkdir(parents=True)
    (member / "node_modules" / "remotion" / "package.json").write_text("{broken")  # unreadable: the next one
    assert remotion_version(member) == "4.0.400"


def test_a_project_that_cannot_work_fails_for_good_naming_the_fix(tmp_path: Path) -> None:
    assert check_project(project(tmp_path / "fine")) == "4.0.529"
    with pytest.raises(RenderError, match="does not exist") as missing:
        check_project(tmp_path / "nowhere")
    assert missing.value.transient is False and missing.value.kind == "setup"
    (tmp_path / "bare").mkdir()
    with pytest.raises(RenderError, match=r"has no package\.json"):
        check_project(tmp_path / "bare")
    uninstalled = project(tmp_path / "uninstalled", None)
    (uninstalled / "yarn.lock").write_text("")
    with pytest.raises(RenderError, match=r"its node_modules is missing; run `yarn install` there"):
        check_project(uninstalled)
    (uninstalled / "node_modules").mkdir()
    with pytest.raises(RenderError, match="it has no remotion package"):
        check_project(uninstalled)


def test_the_bundle_key_follows_the_sources_and_nothing_a_render_writes(tmp_path: Path) -> None:
    root = project(tmp_path / "video")
    cache = root / ".cache-inside" / "bundles"
    key = bundle_key(root, "4.0.529", cache)
    assert bundle_key(root, "4.0.529", cache) == key
    for written in ("node_modules/react/index.js", "out/video.mp4", "build/x.js", ".git/HEAD", "spool/incoming/a.yaml"):
        (root / written).parent.mkdir(parents=True, exist_ok=True)
        (root / written).write_text("x")
    (root / "spool" / "spoolrender.yaml").write_text("slots: 1\n")  # a spool inside the project
    (tmp_path / "elsewhere").mkdir()
    assert bundle_key(root, "4.0.529", tmp_path / "elsewhere") == key
    bundles = root / "bundles"  # a bundle cache that is a plain directory of the project
    bundles.mkdir()
    (bundles / "abc.json").write_text("{}")
    assert bundle_key(root, "4.0.529", bundles) == key
    assert bundle_key(root, "4.0.530", cache) != key  # another Remotion
    (root / "remotion.config.ts").write_text("Config.setScale(0.5);\n")
    with_config = bundle_key(root, "4.0.529", cache)
    assert with_config != key
    source = root / "src" / "index.ts"
    source.write_text("registerRoot(Ruut);\n")  # the same size: known by its mtime (stat, not content)
    os.utime(source, ns=(1, 1))
    assert bundle_key(root, "4.0.529", cache) not in (key, with_config)
