"""Finding a job by id: spool/job_entries.py's rule, and its two lookups built on it
(ops.lookup.find_job: every entry of an id; hooks.plan.open_job_dir: the one entry of an id
and uid, opened) over a real spool whose state directories hold the id's entries beside
names that only look like them (ids may hold dots; uids are public)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.vocabulary import JobState
from spoolrender.hooks.plan import open_job_dir
from spoolrender.ops.lookup import find_job
from spoolrender.spool.job_entries import entry_names, is_entry_of
from spoolrender.spool.layout import SpoolLayout, final_name, retry_name, running_name
from spoolrender.testing import make_spool

U1, U2, U3, U4, U5, U6 = (f"{i:012x}" for i in range(0xA1, 0xA7))
TOKEN = "00000000beef"
DUE = 1_700_000_000.0
# The entries of job id "intro": two uids (a re-run), in running/, retry/, done/ and failed/.
INTRO = [
    ("running", running_name("intro", U1, TOKEN)),
    ("retry", retry_name("intro", U2, DUE, 0)),
    ("done", final_name("intro", U3)),
    ("done", final_name("intro", U4)),
    ("failed", final_name("intro", U4)),  # copied there by hand: still the id's
]
# Names that start or end like intro's and are other jobs': ids with dots (another user's
# `id: intro.<uid>.x`), with intro as their prefix or suffix, and stray names.
OTHERS = [
    ("running", running_name(f"intro.{U1}.x", U5, TOKEN)),
    ("running", running_name("intro-b", U1, TOKEN)),
    ("retry", retry_name(f"intro.{U2}.x", U6, DUE, 0)),
    ("retry", retry_name("xintro", U2, DUE, 0)),
    ("retry", f"intro.{U2}"),  # no due time: no retry/ entry
    ("done", final_name(f"intro.{U3}.x", U6)),
    ("done", final_name("intro2", U3)),
    ("done", f"intro.{U3}.tmp"),
    ("failed", f"intro.{U5}.x"),
]


@pytest.fixture
def config(tmp_path: Path) -> SpoolConfig:
    config = make_spool(tmp_path / "spool")
    layout = SpoolLayout(config.spool)
    for state, name in INTRO + OTHERS:
        (layout.state_dir(state) / name).mkdir()
    return config


@pytest.mark.parametrize(("state", "name"), INTRO)
def test_an_entry_of_the_id_is_its_entry_of_its_uid_alone(state: str, name: str) -> None:
    uid = next(u for u in (U1, U2, U3, U4) if name.endswith(u) or f".{u}." in name)
    assert is_entry_of(JobState(state), name, "intro")
    assert is_entry_of(JobState(state), name, "intro", uid)
    assert not is_entry_of(JobState(state), name, "intro", U6)


@pytest.mark.parametrize(("state", "name"), OTHERS)
def test_a_name_that_only_starts_or_ends_like_the_ids_is_not_its_entry(state: str, name: str) -> None:
    assert not is_entry_of(JobState(state), name, "intro")
    for uid in (U1, U2, U3, U4, U5, U6):
        assert not is_entry_of(JobState(state), name, "intro", uid)


def test_find_job_lists_every_entry_of_the_id_in_state_order_and_nothing_else(config: SpoolConfig) -> None:
    found = find_job(config, "intro", incoming=False)
    assert [(w.state, w.name, w.uid) for w in found] == [
        ("running", INTRO[0][1], U1),
        ("retry", INTRO[1][1], U2),
        ("done", INTRO[2][1], U3),
        ("done", INTRO[3][1], U4),
        ("failed", INTRO[4][1], U4),
    ]
    assert [w.path for w in found] == [config.spool / state / name for state, name in INTRO]


def test_open_job_dir_opens_the_entry_of_the_id_and_uid_that_find_job_lists(config: SpoolConfig) -> None:
    layout = SpoolLayout(config.spool)
    for uid, (state, name) in [(U1, INTRO[0]), (U2, INTRO[1]), (U3, INTRO[2]), (U4, INTRO[3])]:
        with open_job_dir(layout, "intro", uid) as held:
            assert held is not None and held.path == layout.state_dir(state) / name
    for uid in (U5, U6):  # uids of the look-alikes only: never theirs
        with open_job_dir(layout, "intro", uid) as held:
            assert held is None, held.path


def test_an_entry_named_by_its_id_and_uid_is_not_looked_for_in_a_listing() -> None:
    """done/ may hold a million entries: a job of known uid is opened there by name."""

    def listing() -> list[str]:
        raise AssertionError("listed")

    for state in (JobState.DONE, JobState.FAILED, JobState.SPLIT):
        assert entry_names(state, "intro", U1, listing) == [final_name("intro", U1)]
    names = [running_name("intro", U1, TOKEN), running_name(f"intro.{U1}.x", U5, TOKEN)]
    assert entry_names(JobState.RUNNING, "intro", U1, lambda: names) == names[:1]
