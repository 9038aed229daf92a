"""The launches the ledger counts (`write.ledger.Ledger.with_launched`, `add_launched`): found again only when
the launches, the Jobs or the runs' pods changed, and forgotten once past `LAUNCHED_TTL` (a heap of when each
was made). Checked against the walk over every launch that they stand for, over random launches, deletions,
Jobs, pods and clocks. And the protection labels it shows until the watch does (`Ledger.with_labels`)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sj_operator.decide import ClusterView
from sj_operator.observed import JobView, PodView
from sj_operator.policy.snapshot import InFlightRun
from sj_operator.write.ledger import LAUNCHED_TTL, WRITTEN_TTL, Launched, Ledger

KEYS = [("ns", f"run-{i}") for i in range(5)]


def job(key: tuple[str, str]) -> JobView:
    return JobView(namespace=key[0], name=key[1], uid=f"j-{key[1]}", sj="x", deleting=False, complete=False,
                   failed=False)


def pod(key: tuple[str, str], i: int, node: str | None) -> PodView:
    return PodView(namespace=key[0], name=f"{key[1]}-{i}", uid=f"{key[1]}-{i}", sj="x", run=key[1], node=node,
                   phase="Pending", deleting=False, requests={"cpu": 1000})


def unseen(launched: dict[Any, Launched], jobs: dict[Any, JobView], now: float) -> dict[Any, JobView]:
    """`with_launched`'s Jobs, from every launch."""
    return {key: entry.job for key, entry in launched.items() if key not in jobs and now - entry.at <= LAUNCHED_TTL}


def added(launched: dict[Any, Launched], runs: dict[Any, InFlightRun], run_pods: dict[Any, tuple[PodView, ...]],
          now: float) -> dict[Any, InFlightRun]:
    """`add_launched`'s runs, from every launch (forgetting those past their time)."""
    out = dict(runs)
    for key, entry in list(launched.items()):
        if now - entry.at > LAUNCHED_TTL:
            del launched[key]
            continue
        if key not in out:
            scheduled = sum(1 for p in run_pods.get(key, ()) if p.node)
            if scheduled < entry.run.pods:
                out[key] = entry.run if scheduled == entry.run.scheduled_pods else replace(entry.run,
                                                                                           scheduled_pods=scheduled)
    return out


STEPS = st.lists(st.tuples(st.sampled_from(["made", "deleted", "time", "job", "pods", "run", "same"]),
                           st.integers(0, len(KEYS) - 1), st.integers(0, 3)), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(steps=STEPS)
def test_the_launches_counted_are_those_of_a_walk_over_every_launch(steps: list[tuple[str, int, int]]) -> None:
    clock = [0.0]
    ledger = Ledger(lambda: clock[0])
    mirror: dict[Any, Launched] = {}
    jobs: dict[Any, JobView] = {}
    run_pods: dict[Any, tuple[PodView, ...]] = {}
    runs: dict[Any, InFlightRun] = {}
    for what, which, amount in steps:
        key = KEYS[which]
        if what == "made":
            run = InFlightRun(f"ns/{key[1]}", 1 + amount % 3, {"cpu": 1000}, 0)
            ledger.made(key, run, job(key))
            mirror[key] = ledger.launched[key]
        elif what == "deleted":
            ledger.deleted(key)
            mirror.pop(key, None)
        elif what == "time":
            clock[0] += (1.0, 20.0, 45.0, 61.0)[amount]
        elif what == "job":
            jobs = {k: v for k, v in jobs.items() if k != key} if key in jobs else {**jobs, key: job(key)}
        elif what == "pods":
            run_pods = {**run_pods, key: tuple(pod(key, i, "n1" if i < amount else None) for i in range(3))}
        elif what == "run":
            runs = ({k: v for k, v in runs.items() if k != key} if key in runs
                    else {**runs, key: InFlightRun(f"ns/{key[1]}", 2, {"cpu": 1000}, 0)})
        view = ClusterView(sjs=(), jobs=dict(jobs), run_pods=dict(run_pods), active_pods=(), nodes=())
        expected_unseen = unseen(mirror, jobs, clock[0])
        assert dict(ledger.with_launched(view).jobs) == {**jobs, **expected_unseen}
        mine = dict(runs)
        ledger.add_launched(view, mine)
        assert list(mine.items()) == list(added(mirror, runs, run_pods, clock[0]).items())
        assert ledger.launched == mirror


def test_the_runs_made_that_the_watch_does_not_show_count_as_behind_each_once_and_not_when_not_leading(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`Ledger.behind` counts the runs this process made whose Job the watch does not show yet (as the last pass
    found them), each once whatever else counts it; another replica leading forgets them."""
    monkeypatch.setattr("sj_operator.write.ledger.BEHIND_AT", 2)
    ledger = Ledger(lambda: 0.0)
    empty = ClusterView(sjs=(), jobs={}, run_pods={}, active_pods=(), nodes=())
    ledger.made(KEYS[0], InFlightRun("ns/run-0", 1, {"cpu": 1000}, 0), job(KEYS[0]))
    ledger.with_launched(empty)
    assert not ledger.behind, "one run: below BEHIND_AT"
    ledger._behind["u-0"] = KEYS[0]  # the same run, as its SJ's run in flight too
    assert not ledger.behind, "counted once"
    ledger.made(KEYS[1], InFlightRun("ns/run-1", 1, {"cpu": 1000}, 0), job(KEYS[1]))
    ledger.with_launched(empty)
    assert ledger.behind
    ledger.with_launched(replace(empty, jobs={KEYS[1]: job(KEYS[1])}))
    assert not ledger.behind, "the watch shows one of them"
    ledger.with_launched(empty)
    ledger.not_leading()
    assert not ledger.behind


# --- the protection labels written, until the watch shows them ---------------------------------------------

def labelled(key: tuple[str, str], i: int, protected: bool) -> PodView:
    return replace(pod(key, i, "n1"), phase="Running", protected=protected)


@pytest.mark.parametrize(("shown", "after", "expected", "kept"), [
    # The watch does not show the label yet: the ledger does.
    ((False, False), 1.0, (True, True), True),
    # One pod shows it: that one is forgotten, the other still stands in.
    ((True, False), 1.0, (True, True), True),
    # Both show it: the view is the watch's, nothing kept.
    ((True, True), 1.0, (True, True), False),
    # Past WRITTEN_TTL the watch's view holds (someone else may have changed the label back).
    ((False, False), WRITTEN_TTL + 1, (False, False), False),
], ids=["not-shown-yet", "one-shown", "both-shown", "past-its-time"])
def test_the_labels_written_stand_in_the_view_until_the_watch_shows_them(
        shown: tuple[bool, bool], after: float, expected: tuple[bool, bool], kept: bool) -> None:
    key, clock = KEYS[0], [0.0]
    ledger = Ledger(lambda: clock[0])
    for i in range(2):
        ledger.label(key, f"{key[1]}-{i}", True)
    other = (pod(KEYS[1], 0, "n1"),)
    view = ClusterView(sjs=(), jobs={}, run_pods={key: tuple(labelled(key, i, on) for i, on in enumerate(shown)),
                                                  KEYS[1]: other}, active_pods=(), nodes=())
    clock[0] = after
    seen = ledger.with_labels(view)
    assert tuple(p.protected for p in seen.run_pods[key]) == expected
    assert seen.run_pods[KEYS[1]] is other
    assert (seen is not view) == kept and bool(ledger.labelled) == kept
    if not kept:
        assert ledger.with_labels(view) is view


def test_a_label_whose_pod_is_gone_is_forgotten() -> None:
    key = KEYS[0]
    ledger = Ledger(lambda: 0.0)
    ledger.label(key, f"{key[1]}-0", True)
    view = ClusterView(sjs=(), jobs={}, run_pods={}, active_pods=(), nodes=())
    assert ledger.with_labels(view) is view and ledger.labelled == {}
