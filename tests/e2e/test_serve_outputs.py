"""`spoolrender serve` serving the outputs done jobs published (issue 16, item 5), against a
real server over a spool whose videos were rendered by a real ffmpeg (Remotion's).

Only the very file a done job published is served, with its content type and byte ranges;
everything else (other states, traversal, links planted after publishing, a file put in
the published one's place, malformed or huge ranges) is refused.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.browser.server import Server, running_server
from support.browser.videos import FFMPEG, published, video_spool
from support.spool_jobs import entries

from spoolrender.serve.posters import POSTER_NAME
from spoolrender.spool.layout import SpoolLayout

needs_ffmpeg = pytest.mark.skipif(FFMPEG is None, reason="Remotion's ffmpeg missing (scripts/setup.sh installs it)")


@pytest.fixture(scope="module")
def videos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SpoolLayout, Server]]:
    if FFMPEG is None:
        pytest.skip("Remotion's ffmpeg missing (scripts/setup.sh installs it)")
    root = tmp_path_factory.mktemp("videos")
    layout = video_spool(root / "spool")
    with running_server(layout.root, root / "serve.log") as server:
        yield layout, server


@needs_ffmpeg
def test_done_jobs_link_their_output(videos: tuple[SpoolLayout, Server]) -> None:
    _, server = videos
    intro = server.get_json("/jobs/intro")
    assert intro["output_url"] == "/jobs/intro/output" and intro["poster_url"] == "/jobs/intro/poster"
    notes = server.get_json("/jobs/notes")
    assert notes["output_url"] == "/jobs/notes/output" and notes["poster_url"] is None
    for other in ("broken", "waiting"):
        info = server.get_json(f"/jobs/{other}")
        assert info["output_url"] is None and info["poster_url"] is None
    done = {j["id"]: j for j in server.get_json("/jobs?state=done")["jobs"]}
    assert done["intro"]["output_url"] == "/jobs/intro/output" and done["intro"]["poster_url"]


@needs_ffmpeg
def test_output_whole_and_in_ranges(videos: tuple[SpoolLayout, Server]) -> None:
    layout, server = videos
    data = published(layout).read_bytes()
    size = len(data)
    whole = server.get("/jobs/intro/output")
    assert whole.status == 200 and whole.body == data
    assert whole.headers["content-type"] == "video/mp4" and whole.headers["accept-ranges"] == "bytes"
    assert whole.headers["content-length"] == str(size)
    assert whole.headers["content-disposition"] == 'inline; filename="intro.mp4"'
    assert "sandbox" in whole.headers["content-security-policy"]
    head = server.request("HEAD", "/jobs/intro/output")
    assert head.status == 200 and head.body == b"" and head.headers["content-length"] == str(size)

    def ranged(spec: str) -> tuple[int, str | None, bytes]:
        resp = server.get("/jobs/intro/output", headers={"Range": spec})
        return resp.status, resp.headers.get("content-range"), resp.body

    assert ranged("bytes=0-99") == (206, f"bytes 0-99/{size}", data[:100])
    assert ranged("bytes=100-") == (206, f"bytes 100-{size - 1}/{size}", data[100:])
    assert ranged("bytes=-10") == (206, f"bytes {size - 10}-{size - 1}/{size}", data[-10:])
    assert ranged(f"bytes={size - 1}-{size + 1000}") == (206, f"bytes {size - 1}-{size - 1}/{size}", data[-1:])
    assert ranged("bytes=0-" + "9" * 40) == (206, f"bytes 0-{size - 1}/{size}", data)  # huge end: to the end
    assert ranged(f"bytes=-{size * 10}") == (206, f"bytes 0-{size - 1}/{size}", data)
    # Several ranges or another unit: the whole file (a server may ignore such a Range).
    assert ranged("bytes=0-1,5-6")[0] == 200 and ranged("items=0-1")[0] == 200
    # Unsatisfiable or malformed: 416 with the size, and nothing of the file.
    for spec in ("bytes=" + "9" * 40 + "-", f"bytes={size}-", "bytes=abc", "bytes=5-1", "bytes=-0", "bytes=--1",
                 "bytes=1-2-3", "bytes=", "bytes=-", "bytes= 1 2-3", "bytes=0x10-", "bytes=\xb2-"):  # fmt: skip
        status, content_range, body = ranged(spec)
        assert (status, content_range) == (416, f"bytes */{size}"), spec
        assert data[:16] not in body
    # A Range header at the header limit: refused as too large, the server unharmed.
    assert server.get("/jobs/intro/output", headers={"Range": "bytes=" + "1" * 20000 + "-"}).status == 431
    assert server.get("/status").status == 200

    notes = server.get("/jobs/notes/output")
    assert notes.status == 200 and notes.body == b"just some bytes"
    assert notes.headers["content-type"] == "application/octet-stream"
    assert notes.headers["content-disposition"].startswith("attachment;")


@needs_ffmpeg
def test_only_published_outputs_are_served(videos: tuple[SpoolLayout, Server]) -> None:
    layout, server = videos
    (layout.root / "output" / "unpublished.mp4").write_bytes(b"not from a job")
    for path in ("/jobs/broken/output", "/jobs/waiting/output", "/jobs/nope/output", "/jobs/broken/poster"):
        assert server.get(path).status == 404, path
    hostile = ("/jobs/..%2Foutput%2Funpublished.mp4/output", "/jobs/intro/output/../../unpublished.mp4",
               "/jobs/intro/output?path=unpublished.mp4", "/jobs/%2e%2e/output", "/jobs/intro%00/output")  # fmt: skip
    for path in hostile:
        resp = server.get(path)
        assert resp.status in (400, 404) and b"not from a job" not in resp.body, path


def test_links_and_replacements_planted_after_publishing(tmp_path: Path) -> None:
    if FFMPEG is None:
        pytest.skip("Remotion's ffmpeg missing")
    layout = video_spool(tmp_path / "spool")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"SECRET bytes outside the output root")
    video = published(layout)
    original = video.read_bytes()
    with running_server(layout.root, tmp_path / "serve.log") as server:
        assert server.get("/jobs/intro/output").body == original

        def refused() -> None:
            resp = server.get("/jobs/intro/output")
            assert resp.status == 404 and b"SECRET" not in resp.body, resp.status
            assert "no longer where it was published" in resp.error

        # The file itself swapped for a symlink.
        video.rename(video.with_name("moved.mp4"))
        video.symlink_to(secret)
        refused()
        video.unlink()
        # A directory on the way swapped for a symlink to a copy.
        video.with_name("moved.mp4").rename(video)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "intro.mp4").write_bytes(original)
        video.parent.rename(tmp_path / "videos-moved")
        video.parent.symlink_to(elsewhere)
        refused()
        video.parent.unlink()
        (tmp_path / "videos-moved").rename(video.parent)
        assert server.get("/jobs/intro/output").body == original  # back in place: served again
        # Another file (another inode) renamed into its place, even with the same bytes.
        video.with_name("new.mp4").write_bytes(original)
        video.with_name("new.mp4").rename(video)
        refused()
        # A hard link to a file the job did not publish.
        video.unlink()
        os.link(secret, video)
        refused()


@needs_ffmpeg
def test_poster_is_extracted_once_and_cached(videos: tuple[SpoolLayout, Server]) -> None:
    layout, server = videos
    first = server.get("/jobs/intro/poster")
    assert first.status == 200, first.body[:300]
    assert first.headers["content-type"] == "image/jpeg" and first.body[:2] == b"\xff\xd8"
    (done_dir,) = [layout.done / n for n in entries(layout, "done") if n.startswith("intro.")]
    assert (done_dir / POSTER_NAME).read_bytes() == first.body  # cached beside the job's records
    assert server.get("/jobs/intro/poster").body == first.body
    notes = server.get("/jobs/notes/poster")
    assert notes.status == 404 and "no poster" in notes.error
