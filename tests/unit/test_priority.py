"""Running priority, protection and the PriorityClass band (sj_operator.policy.priority)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sj_operator.builders.priority_classes import priority_class_objects
from sj_operator.names import in_band
from sj_operator.policy.priority import (
    PRIORITY_BAND,
    RunClock,
    current_period_start,
    is_protected,
    launch_class,
    run_clock,
    running_level,
)

START = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
DURATION = timedelta(minutes=30)


def at(offset: timedelta) -> datetime:
    """The injected clock: ``offset`` after the period start."""
    return START + offset


@pytest.mark.parametrize(
    ("offset", "levels", "expected"),
    [
        (timedelta(0), 3, 0),
        (timedelta(minutes=9, seconds=59, microseconds=999_999), 3, 0),
        (timedelta(minutes=10), 3, 1),
        (timedelta(minutes=19, seconds=59), 3, 1),
        (timedelta(minutes=20), 3, 2),
        (timedelta(minutes=29, seconds=59, microseconds=999_999), 3, 2),
        (timedelta(minutes=30), 3, 0),
        (timedelta(minutes=40), 3, 1),
        (timedelta(hours=5, minutes=25), 3, 2),
        (timedelta(minutes=-5), 3, 0),
        (timedelta(minutes=29), 1, 0),
        (timedelta(minutes=7, seconds=30), 4, 1),
        (timedelta(minutes=22, seconds=30), 4, 3),
    ],
)
def test_running_level(offset: timedelta, levels: int, expected: int) -> None:
    assert running_level(at(offset), START, DURATION, levels) == expected


@pytest.mark.parametrize(
    ("offset", "expected_start"),
    [
        (timedelta(0), START),
        (timedelta(minutes=29, seconds=59), START),
        (timedelta(minutes=30), START + DURATION),
        (timedelta(minutes=59, seconds=59, microseconds=999_999), START + DURATION),
        (timedelta(hours=2), START + 4 * DURATION),
        (timedelta(minutes=-1), START),
    ],
)
def test_current_period_start(offset: timedelta, expected_start: datetime) -> None:
    assert current_period_start(at(offset), START, DURATION) == expected_start


def test_level_restarts_in_the_advanced_period() -> None:
    now = at(timedelta(minutes=75))
    period_start = current_period_start(now, START, DURATION)
    assert period_start == START + 2 * DURATION
    assert running_level(now, period_start, DURATION, 3) == running_level(now, START, DURATION, 3) == 1


def test_uneven_duration_is_exact() -> None:
    duration = timedelta(seconds=90)
    assert running_level(START + timedelta(seconds=29, microseconds=999_999), START, duration, 3) == 0
    assert running_level(START + timedelta(seconds=30), START, duration, 3) == 1
    assert running_level(START + timedelta(seconds=60), START, duration, 3) == 2
    assert current_period_start(START + timedelta(seconds=90), START, duration) == START + duration


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (running_level, (START, START, timedelta(0), 3)),
        (running_level, (START, START, DURATION, 0)),
        (current_period_start, (START, START, timedelta(seconds=-1))),
    ],
)
def test_invalid_arguments(call, args) -> None:
    with pytest.raises(ValueError):
        call(*args)


@pytest.mark.parametrize(
    ("level", "protect_from_level", "expected"),
    [
        (0, 2, False),
        (1, 2, False),
        (2, 2, True),
        (2, 3, False),  # protect_from_level == levels: never protected with 3 levels
        (0, 0, True),
    ],
)
def test_is_protected(level: int, protect_from_level: int, expected: bool) -> None:
    assert is_protected(level, protect_from_level) is expected


@pytest.mark.parametrize(
    ("interrupted_count", "expected"),
    [
        (0, "scavenger-band-0"),
        (2, "scavenger-band-0"),
        (3, "scavenger-band-1"),
        (5, "scavenger-band-1"),
        (6, "scavenger-band-2"),
        (9, "scavenger-band-2"),
        (10, "scavenger-band-3"),
        (1000, "scavenger-band-3"),
    ],
)
def test_launch_class(interrupted_count: int, expected: str) -> None:
    assert launch_class(interrupted_count) == expected


def test_launch_class_custom_steps() -> None:
    assert launch_class(0, steps=(1, 5)) == "scavenger-band-0"
    assert launch_class(1, steps=(1, 5)) == "scavenger-band-0"
    assert launch_class(5, steps=(1, 5)) == "scavenger-band-1"
    for steps in ((), (0, 0), (3, 1), (0, 1, 2, 3, 4)):
        with pytest.raises(ValueError):
            launch_class(1, steps=steps)
    with pytest.raises(ValueError):
        launch_class(-1)


def test_band_is_below_everything_and_the_autoscaler_cutoff() -> None:
    assert list(PRIORITY_BAND.items()) == [
        ("scavenger-band-0", -1000),
        ("scavenger-band-1", -999),
        ("scavenger-band-2", -998),
        ("scavenger-band-3", -997),
    ]
    assert max(PRIORITY_BAND.values()) < -10


def test_every_class_of_the_band_is_read_as_in_the_band() -> None:
    """A namespace's usage is counted from its pods in the band (`names.in_band`): every class the operator
    launches in must be one of them, and nothing else around them."""
    assert all(in_band(name) for name in PRIORITY_BAND)
    assert not any(in_band(name) for name in ("", "scavenger", "system-cluster-critical", None))


def test_priority_class_objects() -> None:
    objects = priority_class_objects()
    assert [o["metadata"]["name"] for o in objects] == list(PRIORITY_BAND)
    first = objects[0]
    assert first == {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "scavenger-band-0", "labels": {"app.kubernetes.io/managed-by": "scavenger"}},
        "value": -1000,
        "globalDefault": False,
        "preemptionPolicy": "Never",
        "description": first["description"],
    }
    assert all(o["preemptionPolicy"] == "Never" and o["globalDefault"] is False for o in objects)
    assert all(o["description"] for o in objects)
    objects[0]["metadata"]["labels"]["x"] = "y"
    assert "x" not in priority_class_objects()[0]["metadata"]["labels"]


# ----------------------------------------------------------------------------- steering exemptions

from sj_operator.policy.priority import RunProgress, steering_exemptions  # noqa: E402


def _run(key: str, nodes: str, unsaved_s: int, protected: bool) -> RunProgress:
    return RunProgress(key=key, nodes=frozenset(nodes.split(",")), unsaved=timedelta(seconds=unsaved_s),
                       protected_by_level=protected)


@pytest.mark.parametrize(
    ("runs", "exempt"),
    [
        ([], set()),
        # Some run is unprotected already: budgets steer the scheduler to it.
        ([_run("a", "n1", 50, True), _run("b", "n1", 5, False)], set()),
        # ... even on another node: the scheduler prefers the node with no budget violated.
        ([_run("a", "n1", 50, True), _run("b", "n1", 20, True), _run("c", "n2", 40, False)], set()),
        # Every run on the node is protected: the one with the least unsaved work is left out.
        ([_run("a", "n1", 50, True), _run("b", "n1", 12, True), _run("c", "n1", 30, True)], {"b"}),
        # Ties go to the key, so the choice is stable from pass to pass.
        ([_run("b", "n1", 10, True), _run("a", "n1", 10, True)], {"a"}),
        # Per node.
        ([_run("a", "n1", 50, True), _run("b", "n1", 20, True), _run("c", "n2", 40, True)], {"b", "c"}),
        # A gang exempted on one node counts as unprotected on its other nodes too.
        ([_run("g", "n1,n2", 5, True), _run("x", "n1", 30, True), _run("y", "n2", 40, True)], {"g"}),
        # ... so a node it spans already has an unprotected run, even where another run has less unsaved work.
        ([_run("g", "n1,n2", 10, True), _run("x", "n1", 30, True), _run("y", "n2", 5, True)], {"g"}),
        # A lone protected run is exempted: it is its node's only candidate.
        ([_run("a", "n1", 50, True)], {"a"}),
    ],
    ids=["none", "already-unprotected", "unprotected-elsewhere", "least-unsaved", "tie-by-key", "per-node",
         "gang-spans-nodes", "gang-exempt-on-one-node-covers-all", "alone"],
)
def test_steering_exemptions(runs: list[RunProgress], exempt: set[str]) -> None:
    assert steering_exemptions(runs) == exempt


@pytest.mark.parametrize(
    ("offset", "levels", "protect_from", "expected"),
    [
        (timedelta(0), 3, 2, RunClock(START, 0, False)),
        (timedelta(minutes=20), 3, 2, RunClock(START, 2, True)),
        (timedelta(minutes=20), 3, 3, RunClock(START, 2, False)),
        (timedelta(minutes=30), 3, 2, RunClock(START + DURATION, 0, False)),
        (timedelta(minutes=75), 3, 1, RunClock(START + 2 * DURATION, 1, True)),
        (timedelta(minutes=-5), 3, 0, RunClock(START, 0, True)),
    ],
)
def test_a_runs_clock_is_its_period_start_level_and_protection_at_once(
        offset: timedelta, levels: int, protect_from: int, expected: RunClock) -> None:
    assert run_clock(at(offset), START, DURATION, levels, protect_from) == expected
