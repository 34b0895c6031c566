"""The renderer contract (spoolrender.renderers.base.Renderer), one suite run against every
renderer: the fake of spoolrender.testing, the command renderer and (marked ``remotion``) the
Remotion renderer with a warm worker. huey's StorageTests is the model: what the runner
relies on is written once, and a renderer that breaks it fails here, not in a runner.

What the runner relies on: a render writes ``request.output`` and ``verify`` accepts it; a
missing or empty output is refused by ``verify``; a job that can never render fails with a
permanent RenderError; a cancel ends a render promptly with RenderCancelled and the cancel's
reason; progress is a fraction in [0, 1] (or None); ``cache_key`` is None or a hex digest that
equal requests share and other props change; ``close`` may be called twice.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.checkout import REMOTION, REMOTION_MARKS, RENDER_PROPS

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.errors import RenderCancelled, RenderError
from spoolrender.renderers.base import CancelToken, Renderer, RenderRequest
from spoolrender.renderers.command import CommandRenderer
from spoolrender.testing import Fail, FakeRenderer, Hang, make_request, make_spool

CANCEL_DEADLINE = 120.0  # seconds from the cancel to RenderCancelled, on a busy machine


@dataclass
class Subject:
    """A renderer under test and three jobs for it: one it renders, one it can never
    render, one that renders long enough to be cancelled half-way."""

    renderer: Renderer
    config: SpoolConfig
    renders: dict[str, Any]
    never: dict[str, Any]
    long: dict[str, Any]
    other_props: dict[str, Any]  # ``renders`` with other props: another output


class Progress:
    def __init__(self) -> None:
        self.seen: list[float | None] = []
        self.started = threading.Event()

    def __call__(self, fraction: float | None, stage: str | None = None) -> None:
        self.seen.append(fraction)
        self.started.set()


class RendererContract:
    """Every renderer's obligations to the runner; subclasses provide ``subject``."""

    @pytest.fixture
    def subject(self) -> Subject:
        raise NotImplementedError

    def request(self, subject: Subject, job: dict[str, Any], directory: Path) -> RenderRequest:
        return make_request(subject.config, job, directory)

    def test_a_render_writes_the_output_and_verify_accepts_it(self, subject: Subject, tmp_path: Path) -> None:
        request = self.request(subject, subject.renders, tmp_path / "ok")
        progress = Progress()
        result = subject.renderer.render(request, progress, CancelToken())
        subject.renderer.verify(request, result)
        assert request.output.stat().st_size > 0
        assert all(p is None or 0.0 <= p <= 1.0 for p in progress.seen), progress.seen

    def test_verify_refuses_a_missing_or_an_empty_output(self, subject: Subject, tmp_path: Path) -> None:
        request = self.request(subject, subject.renders, tmp_path / "ok")
        result = subject.renderer.render(request, Progress(), CancelToken())
        request.output.write_bytes(b"")
        with pytest.raises(RenderError):
            subject.renderer.verify(request, result)
        request.output.unlink()
        with pytest.raises(RenderError):
            subject.renderer.verify(request, result)

    def test_a_job_that_can_never_render_fails_permanently(self, subject: Subject, tmp_path: Path) -> None:
        request = self.request(subject, subject.never, tmp_path / "never")
        with pytest.raises(RenderError) as failed:
            subject.renderer.render(request, Progress(), CancelToken())
        assert failed.value.transient is False, failed.value
        assert failed.value.kind and str(failed.value)

    def test_a_cancel_ends_a_render_promptly_with_its_reason(self, subject: Subject, tmp_path: Path) -> None:
        request = self.request(subject, subject.long, tmp_path / "long")
        cancel, progress = CancelToken(), Progress()
        ended: list[BaseException | None] = []

        def render() -> None:
            try:
                subject.renderer.render(request, progress, cancel)
                ended.append(None)
            except BaseException as exc:  # handed to the test's thread
                ended.append(exc)

        thread = threading.Thread(target=render)
        thread.start()
        assert progress.started.wait(CANCEL_DEADLINE), "no progress reported: the render never got under way"
        cancelled_at = time.monotonic()
        cancel.cancel("user")
        thread.join(CANCEL_DEADLINE)
        assert not thread.is_alive(), f"still rendering {CANCEL_DEADLINE} s after the cancel"
        assert isinstance(ended[0], RenderCancelled), ended
        assert ended[0].reason == "user"
        assert time.monotonic() - cancelled_at < CANCEL_DEADLINE

    def test_cache_key_is_none_or_a_digest_that_follows_the_props(self, subject: Subject, tmp_path: Path) -> None:
        first = subject.renderer.cache_key(self.request(subject, subject.renders, tmp_path / "a"))
        again = subject.renderer.cache_key(self.request(subject, subject.renders, tmp_path / "b"))
        other = subject.renderer.cache_key(self.request(subject, subject.other_props, tmp_path / "c"))
        if first is None:
            assert again is None
            return
        assert re.fullmatch(r"[0-9a-f]{32,128}", first), first
        assert again == first and other != first

    def test_close_may_be_called_twice(self, subject: Subject) -> None:
        subject.renderer.close()
        subject.renderer.close()


class TestFakeRenderer(RendererContract):
    @pytest.fixture
    def subject(self, tmp_path: Path) -> Subject:
        fake = FakeRenderer()
        fake.script("never", Fail("invalid-props", transient=False))
        fake.script("long", Hang())
        base = {"composition": "Intro", "output": "x.mp4"}
        return Subject(
            fake,
            make_spool(tmp_path / "spool"),
            renders={"id": "renders", **base},
            never={"id": "never", **base},
            long={"id": "long", **base},
            other_props={"id": "renders", **base, "props": {"title": "other"}},
        )


class TestCommandRenderer(RendererContract):
    @pytest.fixture
    def subject(self, tmp_path: Path) -> Iterator[Subject]:
        config = make_spool(
            tmp_path / "spool", {"commands": {"props": [sys.executable, str(RENDER_PROPS), "{output}", "{props_file}"]}}
        )
        base = {"renderer": "command", "command": "props", "output": "x.txt"}
        renderer = CommandRenderer(config)
        yield Subject(
            renderer,
            config,
            renders={"id": "renders", **base, "props": {"content": "hello"}},
            never={"id": "never", **base, "props": {"exit": 65}},  # sysexits: this job is wrong
            long={"id": "long", **base, "props": {"until_file": str(tmp_path / "never-written")}},
            other_props={"id": "renders", **base, "props": {"content": "other"}},
        )
        renderer.close()


@pytest.fixture(scope="module")
def remotion_renderer(
    tmp_path_factory: pytest.TempPathFactory, sample_bundles: Path
) -> Iterator[tuple[Renderer, SpoolConfig]]:
    from spoolrender.renderers.remotion.renderer import RemotionRenderer

    root = tmp_path_factory.mktemp("contract")
    config = make_spool(root / "spool", {"remotion_project": str(REMOTION), "cache_dir": str(sample_bundles)})
    renderer = RemotionRenderer(config)
    yield renderer, config
    renderer.close()


@pytest.mark.slow  # a warm Remotion worker: three short renders, one of them cancelled
class TestRemotionRenderer(RendererContract):
    pytestmark = REMOTION_MARKS

    @pytest.fixture
    def subject(self, remotion_renderer: tuple[Renderer, SpoolConfig]) -> Subject:
        renderer, config = remotion_renderer
        base = {"composition": "Tiny", "output": "x.mp4"}
        return Subject(
            renderer,
            config,
            renders={"id": "renders", **base, "props": {"frames": 4}},
            never={"id": "never", **base, "composition": "NoSuchComposition"},
            long={"id": "long", **base, "props": {"frames": 3000}},
            other_props={"id": "renders", **base, "props": {"frames": 5}},
        )
