"""The dashboard's look in a real headless Chromium (Debian's): search, a phone's width, dark
mode, readable plots, human sizes and times (issue 24, items 6 and 8-11).

One spool, one `spoolrender serve`, one runner and one browser for the whole module: a
real drain leaves a done, a failed (with a long reason) and a waiting retry job; a runner
holds one job at 30 % (the test decides how far it renders, never a clock). What a real
render of many Remotion jobs would take minutes to leave behind is written in the runner's
layout instead: done jobs with compositions and props, one a render-cache hit, and twenty
minutes of history samples (the server only reads these files).

Screenshots of every page at 1280 px and 390 px, light and dark, go to ``$ARTIFACTS``
(if set) or to ``dashboard-look/`` under pytest's temporary directory; the test prints
where.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.browser.cdp import CHROMIUM, Chromium, Page
from support.browser.server import Server, running_server
from support.processes import runner_processes, spoolrender_cmd
from support.spool_jobs import allow_steps, command_job, drop, entries, write_spool_config
from support.waiting import wait_for

from spoolrender.spool.heartbeat import read_heartbeat
from spoolrender.spool.layout import SpoolLayout, init_spool

pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason=f"{CHROMIUM} missing (scripts/setup.sh installs Debian's chromium)"
)

TOKEN = "dashboard-look-token-0123456789"
PHONE = 390
LONG_REASON = (
    "props.title is missing: the composition TitleCard needs a title of at most 80 characters, "
    "and a subtitle that the props schema in remotion/src/schemas.ts describes; see the job file's "
    "props section and the project's documentation for the fields it takes"
)
COMPOSED = {  # id: (composition, props)
    "intro-en": ("TitleCard", {"title": "Hello World", "lang": "en"}),
    "intro-de": ("TitleCard", {"title": "Hallo Welt", "lang": "de"}),
    "promo-de": ("PromoReel", {"product": "Spool Pro", "lang": "de"}),
}
OUTPUT_BYTES = 573_755
SAMPLES = 20  # minutes of history
PAGES = {  # name: path
    "overview": "",
    "browse": "browse?state=done",
    "job-failed": "job?id=bad",
    "job-done": "job?id=cached",
    "job-running": "job?id=render-live",
}


@dataclass
class Site:
    layout: SpoolLayout
    server: Server
    browser: Chromium
    artifacts: Path
    samples: list[dict[str, Any]]


def done_entry(layout: SpoolLayout, job_id: str, uid: str, job: dict[str, Any], result: dict[str, Any]) -> None:
    """A done job as a runner leaves it: job.yaml and result.json (the stamp of its time)."""
    d = layout.done / f"{job_id}.{uid}"
    d.mkdir()
    (d / "job.yaml").write_text(yaml.safe_dump(job))
    (d / "result.json").write_text(json.dumps({"id": job_id, "uid": uid, **result}))


def history_samples(layout: SpoolLayout, now: float) -> list[dict[str, Any]]:
    """SAMPLES one-minute samples up to the last whole minute, as `serve` writes them."""
    directory = layout.private / "history"
    directory.mkdir(exist_ok=True)
    last = int(now // 60) * 60 - 60
    samples = []
    for i in range(SAMPLES):
        start = last - (SAMPLES - 1 - i) * 60
        sample: dict[str, Any] = {
            "start": start, "interval": 60, "done": i % 3, "failed": 1 if i % 5 == 0 else 0,
            "durations": [1.5 + (i % 4) * 0.5] * (i % 3), "counts": {}, "backlog": i % 4,
            "oldest_waiting_seconds": 30 * i,
            "runners": [{"runner": "r-0123456789", "host": "render-a", "busy": i % 3, "slots": 2}],
        }  # fmt: skip
        (directory / f"{start:010d}-60.json").write_text(json.dumps(sample))
        samples.append(sample)
    return samples


def progress_now(layout: SpoolLayout) -> float:
    names = entries(layout, "running")
    hb = read_heartbeat(layout.running / names[0]) if len(names) == 1 else None
    return (hb.progress or 0.0) if hb is not None else 0.0


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("look")
    layout = init_spool(tmp / "spool")
    token_file = layout.root / "serve-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    write_spool_config(
        layout, {"backoff_base_seconds": 900, "backoff_cap_seconds": 900, "slots": 1, "serve_token_file": "serve-token"}
    )
    drop(layout, "good.yaml", command_job())
    drop(layout, "bad.yaml", command_job(exit=65, message=LONG_REASON))
    drop(layout, "flaky.yaml", command_job(exit=1))
    drain = subprocess.run(spoolrender_cmd("run", "--drain", "--spool", str(layout.root)), capture_output=True,
                           timeout=120, check=False)  # fmt: skip
    assert drain.returncode == 3, drain.stderr
    for i, (job_id, (composition, props)) in enumerate(COMPOSED.items()):
        job = {"renderer": "remotion", "composition": composition, "props": props}
        done_entry(layout, job_id, f"{i:012x}", job, {"output": f"out/{job_id}.mp4", "bytes": 1_000 + i})
    hit = {"renderer": "remotion", "composition": "TitleCard", "props": {"title": "Hello World", "lang": "en"}}
    done_entry(layout, "cached", "c" * 12, hit, {"output": "out/cached.mp4", "bytes": OUTPUT_BYTES, "cache": "hit",
               "cache_source": {"id": "intro-en", "uid": "0" * 12}, "duration_seconds": 0.2})  # fmt: skip
    samples = history_samples(layout, time.time())
    artifacts = Path(os.environ["ARTIFACTS"]) if os.environ.get("ARTIFACTS") else tmp / "dashboard-look"
    artifacts.mkdir(parents=True, exist_ok=True)

    runners = runner_processes(layout)  # the start_runner fixture's runners, for a module: start, and stop at the end
    start_runner = next(runners)
    try:
        start_runner(log=tmp / "runner.log")
        with running_server(layout.root, tmp / "serve.log", "--poll", "0.25") as server, Chromium() as browser:
            steps = tmp / "steps"
            allow_steps(steps, 3)  # and no further: it stays running at 30 % for the module
            drop(layout, "render-live.yaml", command_job(steps_file=str(steps)))
            wait_for(lambda: abs(progress_now(layout) - 0.3) < 1e-6, timeout=60)
            yield Site(layout, server, browser, artifacts, samples)
    finally:
        next(runners, None)
        print(f"dashboard-look screenshots: {artifacts}")


def open_page(site: Site, path: str, *, width: int = 1280, scheme: str = "light") -> Page:
    page = site.browser.new_page(site.server.url + path, width=width, height=844 if width == PHONE else 900,
                                 mobile=width == PHONE, color_scheme=scheme)  # fmt: skip
    page.wait_for("document.body.dataset.ready === '1'")
    if path == "":
        page.wait_for(
            "document.querySelector('#plots').dataset.samples > 0 && document.querySelector('#running .bar') !== null"
        )
    return page


def submit_filters(page: Page, values: dict[str, str]) -> list[str]:
    for field, value in values.items():
        page.evaluate(f"document.querySelector('#f-{field}').value = {json.dumps(value)}")
    loaded = page.evaluate("document.body.dataset.loaded")
    page.evaluate("document.querySelector('#filters button[type=submit]').click()")
    page.wait_for(f"document.body.dataset.loaded !== '{loaded}'")
    ids: list[str] = page.evaluate("[...document.querySelectorAll('#list tbody tr')].map(r => r.dataset.job)")
    return ids


def test_search_by_composition_and_props(site: Site) -> None:
    def ids(query: str) -> list[str]:
        return sorted(j["id"] for j in site.server.get_json(f"/jobs?{query}")["jobs"])

    assert ids("composition=titlecard") == ["cached", "intro-de", "intro-en"]  # any case, a substring
    assert ids("composition=Promo") == ["promo-de"]
    assert ids("props=hallo") == ["intro-de"]
    assert ids("props=%22lang%22%3A%20%22de%22") == ["intro-de", "promo-de"]  # "lang": "de", as JSON text
    assert ids("composition=TitleCard&props=world&state=done") == ["cached", "intro-en"]
    assert ids("props=exit") == ["bad", "flaky"]  # command jobs' props too; no composition though
    assert ids("composition=c&props=exit") == []
    refused = site.server.get("/jobs?props=%01")
    assert refused.status == 400 and "props" in refused.error

    page = open_page(site, "browse")
    assert submit_filters(page, {"composition": "TitleCard", "props": "Hello"}) == ["cached", "intro-en"]
    assert page.evaluate("location.search") == "?composition=TitleCard&props=Hello"  # the view can be linked
    page.close()
    page = open_page(site, "browse?props=lang")
    assert page.evaluate("document.querySelector('#f-props').value") == "lang"
    assert page.evaluate("document.querySelector('#range').textContent").endswith("of 4")
    assert page.errors() == []
    page.close()


# Every element wider than the viewport would widen the page: none may stick out.
OVERFLOW = "document.documentElement.scrollWidth"
BOX = "(e => (r => [r.width, r.height])(e.getBoundingClientRect()))"
TEXT_TITLE = "(e => [e.textContent, e.title])"
VISIBLE = f"(e => {{ const r = e.getBoundingClientRect(); return r.width > 40 && r.left >= 0 && r.right <= {PHONE}; }})"


def test_every_page_fits_a_phone(site: Site) -> None:
    for name, path in PAGES.items():
        page = open_page(site, path, width=PHONE)
        assert page.evaluate(OVERFLOW) <= PHONE, (name, page.evaluate(OVERFLOW))
        for control in ("#auth-token", "#auth-form button", "#theme-toggle"):
            assert page.evaluate(f"{VISIBLE}(document.querySelector('{control}'))"), (name, control)
        assert page.errors() == [], name
        if name == "overview":
            # A reason reads as a line, not a column of 4-5 characters; the bar keeps its size.
            assert page.evaluate("document.querySelector('#failures td.reason').getBoundingClientRect().width") >= 130
            bar = page.evaluate(f"{BOX}(document.querySelector('#running .bar'))")
            assert bar[0] >= 70 and bar[1] >= 10, bar
            # The plots fit the panel: none is wider than the page.
            widths = page.evaluate(
                "[...document.querySelectorAll('svg.plot')].map(s => s.getBoundingClientRect().right)"
            )
            assert widths and max(widths) <= PHONE
        if name == "job-running":
            bar = page.wait_for(f"(b => b[0] ? b : null)({BOX}(document.querySelector('#progress .bar')))")
            assert bar[0] >= 150 and bar[1] >= 10, bar
        page.close()


BACKGROUND = "getComputedStyle(document.documentElement).backgroundColor"
PANEL = "getComputedStyle(document.querySelector('.panel')).backgroundColor"


def test_dark_mode_follows_the_system_and_the_toggle(site: Site) -> None:
    page = open_page(site, "", scheme="dark")
    assert page.evaluate(BACKGROUND) == "rgb(17, 20, 26)"
    assert page.evaluate(PANEL) == "rgb(26, 30, 39)"
    assert page.evaluate("getComputedStyle(document.body).color") == "rgb(226, 229, 235)"
    assert page.evaluate("document.querySelector('#theme-toggle').dataset.theme") == "auto"
    page.emulate_color_scheme("light")  # the system changes its mind: the page follows at once
    assert page.evaluate(BACKGROUND) == "rgb(245, 246, 248)"

    # The toggle: auto -> dark (remembered) -> light -> auto, over what the system says.
    page.evaluate("document.querySelector('#theme-toggle').click()")
    assert page.evaluate(BACKGROUND) == "rgb(17, 20, 26)"
    assert page.evaluate("localStorage.getItem('spoolrender-theme')") == "dark"
    page.close()
    page = open_page(site, "browse", scheme="light")  # another page, another visit: still dark
    assert page.evaluate(BACKGROUND) == "rgb(17, 20, 26)"
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    page.evaluate("document.querySelector('#theme-toggle').click()")
    page.emulate_color_scheme("dark")
    assert page.evaluate(BACKGROUND) == "rgb(245, 246, 248)"  # light, chosen, over a dark system
    page.evaluate("document.querySelector('#theme-toggle').click()")
    assert page.evaluate("localStorage.getItem('spoolrender-theme')") is None  # back to the system's
    assert page.evaluate(BACKGROUND) == "rgb(17, 20, 26)"
    assert page.errors() == []
    page.close()


TICKS = (
    "Object.fromEntries([...document.querySelectorAll('.plot-box')].map(b => [b.id, "
    "['.x-tick', '.y-tick'].map(c => [...b.querySelectorAll(c)].map(t => t.textContent))]))"
)


def test_plots_read_well(site: Site) -> None:
    page = open_page(site, "")
    # The default window starts at the history's first sample: 20 minutes fill 30 minutes' width.
    assert page.evaluate("document.querySelector('#plot-range button.active').textContent") == "recent"
    assert page.evaluate("document.querySelector('#plots').dataset.window") == "1800"
    xs = page.evaluate(
        "[...document.querySelectorAll('#plot-finished .bar-done')].map(r => Number(r.getAttribute('x')))"
    )
    assert xs and (max(xs) - min(xs)) / 500 > 0.5, xs  # bars across more than half the plot, not a sliver
    assert "last 30 min" in page.evaluate("document.querySelector('#plot-finished figcaption').textContent")

    for hours, window in (("1", 3600), ("6", 21600), ("24", 86400), ("48", 172800), ("", 1800)):
        page.evaluate(f"document.querySelector('#plot-range button[data-hours=\"{hours}\"]').click()")
        page.wait_for(f"document.querySelector('#plots').dataset.window === '{window}'")
        for plot, axes in page.evaluate(TICKS).items():  # on every window no axis repeats a label
            for labels in axes:
                assert len(labels) >= 2 and len(set(labels)) == len(labels), (hours, plot, labels)

    # Throughput today (as Sidekiq's Processed / Failed): the history's samples since local midnight.
    midnight = time.mktime((*time.localtime()[:3], 0, 0, 0, 0, 0, -1))
    today = [s for s in site.samples if s["start"] >= midnight]
    page.wait_for(f"document.querySelector('#today-done .n')?.textContent === '{sum(s['done'] for s in today)}'")
    failed = page.evaluate("document.querySelector('#today-failed .n').textContent")
    assert failed == str(sum(s["failed"] for s in today))
    totals = site.server.get_json(f"/history?hours=1&totals_since={midnight:.0f}")["totals"]
    assert totals["done"] == sum(s["done"] for s in today) and totals["since"] == int(midnight)
    assert site.server.get("/history?totals_since=yesterday").status == 400

    # Hover: the bar under the pointer says its values (tooltip and caption read-out).
    for plot in ("plot-finished", "plot-backlog", "plot-runners"):
        page.evaluate(f"document.querySelector('#{plot}').scrollIntoView({{block: 'center'}})")
        hit = page.evaluate(
            f"(h => {{ const r = h.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2,"
            f" h.dataset.value, h.querySelector('title').textContent]; }})"
            f"([...document.querySelectorAll('#{plot} .hit')].at(-3))"
        )
        assert hit[2] == hit[3] and hit[2], hit
        page.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": hit[0], "y": hit[1]})
        assert page.wait_for(f"document.querySelector('#{plot} .readout').textContent") == hit[2]
    assert page.errors() == []
    page.close()


def test_human_sizes_times_and_reasons(site: Site) -> None:
    page = open_page(site, "")
    reason = page.evaluate(f"{TEXT_TITLE}(document.querySelector('#failures td.reason'))")
    assert reason[0].endswith("…") and len(reason[0]) <= 161 and LONG_REASON in reason[1], reason
    cut, whole = reason[0][:-1], reason[1]
    assert whole.startswith(cut) and whole[len(cut)] in " ,;:.", cut  # at a word's end
    page.close()

    page = open_page(site, "browse?state=done")
    size = page.evaluate(f"{TEXT_TITLE}(document.querySelector('#list tr[data-job=\"cached\"] td.details span'))")
    assert size == ["560 KiB", "573,755 bytes"]
    page.close()

    page = open_page(site, "job?id=cached")
    facts = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#facts dt')]"
        ".map(t => [t.textContent, t.nextSibling.textContent]))"
    )
    assert facts["size"] == "560 KiB" and "bytes" not in json.dumps(facts)
    link = page.evaluate("document.querySelector('#facts dd a.job-link')?.getAttribute('href')")
    assert link == "/job?id=intro-en"  # the cache hit's source job
    page.close()

    page = open_page(site, "job?id=bad")
    started = page.evaluate(
        "(t => t && [t.textContent, t.title, t.getAttribute('datetime')])(document.querySelector('#runs time'))"
    )
    assert started and len(started[0]) <= 20 and started[1] and started[2].endswith("Z"), started
    error = page.evaluate(f"{TEXT_TITLE}(document.querySelector('#runs td.reason'))")
    assert error[0].endswith("…") and LONG_REASON in error[1]
    assert page.errors() == []
    page.close()


@pytest.mark.slow
def test_screenshots_of_every_page(site: Site) -> None:
    """A screenshot per page, 1280 and 390 px wide, light and dark (look at them). One load
    per page: the width and the colours change in place (CSS alone follows them)."""
    shots = []
    for name, path in PAGES.items():
        page = open_page(site, path)
        if path.startswith("job"):
            page.wait_for("document.querySelector('#jobfile').textContent !== ''")
        for width, schemes in ((1280, ("light", "dark")), (PHONE, ("dark", "light"))):
            page.resize(width, 844 if width == PHONE else 900, mobile=width == PHONE)
            for scheme in schemes:
                page.emulate_color_scheme(scheme)
                shots.append(page.screenshot(site.artifacts / f"{name}-{width}-{scheme}.png"))
        assert page.errors() == [], name
        page.close()
    assert all(s.stat().st_size > 5_000 for s in shots)
    print(f"{len(shots)} screenshots in {site.artifacts}")
