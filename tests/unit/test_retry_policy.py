"""RetryPolicy: one backoff for jobs, hooks, blocked claims and spool I/O, the same delays as before.

The four formulas it replaced are copied here verbatim (as they stood in lifecycle/transitions.py,
hooks/dispatcher.py, intake/scan.py and spool/io_trouble.py before RetryPolicy) and compared with it float for
float, for the same config and rng seed, with the rng left in the same state.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from spoolrender import defaults
from spoolrender.config.hooks import parse_hooks
from spoolrender.config.spool_config import SpoolConfig
from spoolrender.core.retry_policy import RetryPolicy
from spoolrender.spool.io_trouble import next_delay
from spoolrender.testing import make_spool


# --- the formulas before RetryPolicy (verbatim) ------------------------------------------
def old_backoff_delay(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    # transitions.backoff_delay: jobs (executor, recovery) and hooks (hooks/dispatcher.py)
    delay = min(cap, base * (2 ** max(0, attempt - 1)))
    return float(delay / 2 + rng.random() * delay / 2)


def old_spool_io_delay(failures: int) -> float:
    # spool_io.next_delay
    return float(min(defaults.SPOOL_IO_RETRY_MAX_S, defaults.SPOOL_IO_RETRY_MIN_S * 2 ** max(0, failures - 1)))


def old_blocked_delay(failures: int) -> float:
    # scan.SpoolScanner.claim_failed (failures counts from 1)
    delay: float = min(defaults.BLOCKED_RETRY_MAX_S, defaults.BLOCKED_RETRY_MIN_S * 2 ** (failures - 1))
    return delay


# Job configs as spools set them (ints as YAML gives them, floats, a zero base, base == cap)
# and hook backoffs as hooks: sets them, each with the cap it had.
JOB_CONFIGS = [(30.0, 3600.0), (30, 3600), (0.01, 0.05), (1.0, 60.0), (0.0, 0.0), (7.5, 7.5), (0.3, 1e6)]
HOOK_BACKOFFS = [defaults.HOOK_BACKOFF_BASE_S, 0.5, 1, 899.9, defaults.HOOK_BACKOFF_CAP_S]


@pytest.mark.parametrize(("base", "cap"), JOB_CONFIGS)
def test_job_delays_are_the_old_formulas_for_the_same_seed(base: float, cap: float) -> None:
    for seed in range(20):
        old_rng, new_rng = random.Random(seed), random.Random(seed)
        policy = RetryPolicy(base, cap, jitter=True)
        for attempt in range(0, 101):  # max_attempts is at most 100 (MAX_MAX_ATTEMPTS)
            assert policy.delay(attempt, new_rng) == old_backoff_delay(attempt, base, cap, old_rng), (seed, attempt)
        assert new_rng.getstate() == old_rng.getstate()  # one draw per delay, as before


def test_the_spools_settings_make_its_job_policy(tmp_path: Path) -> None:
    config = make_spool(tmp_path / "spool", {"backoff_base_seconds": 2, "backoff_cap_seconds": 50})
    assert config.job_retry == RetryPolicy(2, 50, jitter=True)
    assert SpoolConfig(spool=tmp_path / "spool").job_retry == defaults.JOB_RETRY
    assert RetryPolicy(defaults.BACKOFF_BASE_S, defaults.BACKOFF_CAP_S, jitter=True) == defaults.JOB_RETRY
    for seed in range(10):
        old_rng, new_rng = random.Random(seed), random.Random(seed)
        for attempt in range(1, 12):
            new = config.job_retry.with_attempts(20).retry_in(attempt, new_rng)
            assert new == old_backoff_delay(attempt, 2, 50, old_rng)


def test_a_job_is_retried_while_attempts_are_left_as_before() -> None:
    # executor._failure and recovery._dead_run_record: retried while attempt < max_attempts.
    for max_attempts in (1, 2, 3, 10):
        policy = defaults.JOB_RETRY.with_attempts(max_attempts)
        rng = random.Random(3)
        for attempt in range(1, 12):
            state = rng.getstate()
            wait = policy.retry_in(attempt, rng)
            assert (wait is not None) == (attempt < max_attempts)
            if wait is None:
                assert rng.getstate() == state  # no draw for a job that fails for good, as before


@pytest.mark.parametrize("backoff", HOOK_BACKOFFS)
def test_hook_delays_are_the_old_formula_for_the_same_seed(tmp_path: Path, backoff: float) -> None:
    (spec,) = parse_hooks(tmp_path, {"h": {"command": ["true"], "attempts": 12, "backoff_seconds": backoff}}).values()
    assert spec.retry == RetryPolicy(backoff, defaults.HOOK_BACKOFF_CAP_S, jitter=True, max_attempts=12)
    for seed in range(10):
        old_rng, new_rng = random.Random(seed), random.Random(seed)
        for attempts in range(1, 13):
            new = spec.retry.retry_in(attempts, new_rng)
            if attempts >= spec.attempts:  # hooks/dispatcher.py gave up here, drawing nothing
                assert new is None
                continue
            old = old_backoff_delay(attempts, spec.backoff_seconds, defaults.HOOK_BACKOFF_CAP_S, old_rng)
            assert new == old
        assert new_rng.getstate() == old_rng.getstate()


def test_hooks_default_policy_is_the_named_defaults(tmp_path: Path) -> None:
    (spec,) = parse_hooks(tmp_path, {"h": {"url": "http://127.0.0.1:9/x"}}).values()
    assert spec.retry == defaults.HOOK_RETRY
    assert (
        RetryPolicy(
            defaults.HOOK_BACKOFF_BASE_S, defaults.HOOK_BACKOFF_CAP_S, jitter=True, max_attempts=defaults.HOOK_ATTEMPTS
        )
        == defaults.HOOK_RETRY
    )


def test_spool_io_and_blocked_claim_delays_are_the_old_formulas() -> None:
    for failures in range(0, 1000):
        assert next_delay(failures) == old_spool_io_delay(failures)
        assert defaults.SPOOL_IO_RETRY.delay(failures) == old_spool_io_delay(failures)
    for failures in range(1, 1000):
        assert defaults.BLOCKED_CLAIM_RETRY.delay(failures) == old_blocked_delay(failures)
    assert [defaults.BLOCKED_CLAIM_RETRY.delay(n) for n in range(1, 12)] == [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300,
    ]  # fmt: skip


def test_a_long_condition_stays_at_the_cap_where_the_old_formulas_overflowed() -> None:
    # The spool I/O step and a blocked entry's failures grow for as long as the trouble lasts
    # (1024 failures: about 8.5 hours of a full disk at 30 s): the old formulas raised there.
    with pytest.raises(OverflowError):
        old_spool_io_delay(1100)
    with pytest.raises(OverflowError):
        old_blocked_delay(1100)
    assert next_delay(1100) == next_delay(10**9) == defaults.SPOOL_IO_RETRY_MAX_S
    assert defaults.BLOCKED_CLAIM_RETRY.delay(5000) == defaults.BLOCKED_RETRY_MAX_S
    assert RetryPolicy(0.0, 0.0).delay(5000) == 0.0
    jittered = RetryPolicy(1.0, 10.0, jitter=True).delay(10**6, random.Random(1))
    assert 5.0 <= jittered <= 10.0


def test_an_unjittered_policy_draws_nothing_and_a_jittered_one_needs_an_rng() -> None:
    rng = random.Random(5)
    state = rng.getstate()
    assert RetryPolicy(1.0, 30.0).delay(3, rng) == 4.0
    assert rng.getstate() == state
    with pytest.raises(ValueError, match="rng"):
        RetryPolicy(1.0, 30.0, jitter=True).delay(3)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((-1.0, 10.0), {}, "base_seconds"),
        ((1.0, math.inf), {}, "cap_seconds"),
        ((math.nan, 10.0), {}, "base_seconds"),
        ((True, 10.0), {}, "base_seconds"),
        (("1", 10.0), {}, "base_seconds"),
        ((10.0, 1.0), {}, "below base_seconds"),
        ((1.0, 10.0), {"jitter": 1}, "jitter"),
        ((1.0, 10.0), {"max_attempts": 0}, "max_attempts"),
        ((1.0, 10.0), {"max_attempts": 2.0}, "max_attempts"),
        ((1.0, 10.0), {"max_attempts": True}, "max_attempts"),
    ],
)
def test_a_policy_is_validated_when_built(args: tuple[object, ...], kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RetryPolicy(*args, **kwargs)  # type: ignore[arg-type]


def test_a_policy_is_frozen_and_with_attempts_is_validated_too() -> None:
    policy = RetryPolicy(1.0, 10.0, jitter=True)
    with pytest.raises(AttributeError):
        policy.base_seconds = 2.0  # type: ignore[misc]
    assert policy.with_attempts(3).max_attempts == 3 and policy.max_attempts is None
    with pytest.raises(ValueError, match="max_attempts"):
        policy.with_attempts(0)
