"""Acting only on what an SJ owns: which object is an SJ's (its controller ownerReference), which runs are
strays, and that a Job of a run's name that the SJ does not control is never taken as its run."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sj_operator.api import parse_status
from sj_operator.decide import ClusterView, Strays, changed_keys, observe_one, stray_runs
from sj_operator.names import controlled_by, controller_uid, owner_reference
from sj_operator.observed import JobView, PodView, SJObject, job_view
from sj_operator.policy.lifecycle import LifecycleConfig, capped_doubling, refusal_reason, retry_delay, thrash_delay

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SJ_REF = owner_reference("work", "u-work")


def ref(**changes: Any) -> dict[str, Any]:
    return {**SJ_REF, **changes}


@pytest.mark.parametrize(("refs", "controller"), [
    ([SJ_REF], "u-work"),
    ([ref(blockOwnerDeletion=False)], "u-work"),
    ([{"apiVersion": "batch/v1", "kind": "CronJob", "name": "c", "uid": "c", "controller": True}, SJ_REF], "u-work"),
    (None, None),
    ([], None),
    ([ref(controller=False)], None),
    ([ref(controller=None)], None),
    ([{k: v for k, v in SJ_REF.items() if k != "controller"}], None),
    ([ref(kind="Job")], None),
    ([ref(apiVersion="evil.dev/v1alpha1")], None),
    ([ref(apiVersion="scavenger.dev.evil.dev/v1")], None),
    ([ref(uid="")], None),
    ([ref(uid=None)], None),
    (["not a reference"], None),
], ids=["the-sjs", "no-block", "after-another-owners", "none", "empty", "not-controller", "controller-null",
        "controller-missing", "another-kind", "another-group", "a-group-that-only-begins-alike", "empty-uid",
        "no-uid", "garbage"])
def test_the_sj_that_controls_an_object_is_its_controller_reference_of_kind_scavengerjob(refs, controller):
    meta = {"name": "work-r1"} if refs is None else {"name": "work-r1", "ownerReferences": refs}
    assert controller_uid(meta) == controller
    assert controlled_by(meta, "u-work") is (controller == "u-work")


@pytest.mark.parametrize(("meta", "uid", "expected"), [
    ({"ownerReferences": [SJ_REF]}, "u-work", True),
    ({"ownerReferences": [SJ_REF]}, "u-other", False),
    ({"ownerReferences": [SJ_REF]}, "", False),
    ({"labels": {"scavenger.dev/job-name": "work"}}, "u-work", False),
], ids=["its-own", "another-sjs", "no-uid-asked", "labels-say-nothing"])
def test_only_the_controller_reference_makes_an_object_an_sjs(meta, uid, expected):
    assert controlled_by(meta, uid) is expected


def job(name: str, owner: str | None, *, deleting: bool = False) -> JobView:
    return JobView(namespace="ns", name=name, uid=f"j-{name}", sj=name.rsplit("-", 1)[0], deleting=deleting,
                   complete=False, failed=False, owner=owner)


@pytest.mark.parametrize(("jobs", "known", "keep", "strays"), [
    ([job("a-r1", "u-a")], {("u-a", ("ns", "a-r1"))}, (), []),
    ([job("a-r1", "u-a")], set(), (), ["a-r1"]),
    ([job("a-r1", "u-a")], {("u-a", ("ns", "a-r2"))}, (), ["a-r1"]),
    ([job("a-r1", "u-old")], {("u-a", ("ns", "a-r1"))}, (), ["a-r1"]),
    ([job("a-r1", None)], set(), (), []),
    ([job("a-r1", "u-a", deleting=True)], set(), (), []),
    ([job("a-r1", "u-a")], set(), {("ns", "a-r1")}, []),
    ([job("a-r1", "u-a"), job("mine-r1", None), job("b-r3", "u-b")], {("u-a", ("ns", "a-r1"))}, (), ["b-r3"]),
], ids=["pointed-at", "sj-gone", "sj-moved-on", "an-sj-of-the-same-name-made-again", "no-sj-controls-it",
        "being-deleted", "just-launched", "mixed"])
def test_a_stray_is_a_run_its_controlling_sj_no_longer_points_at_never_someone_elses_job(jobs, known, keep, strays):
    assert [j.name for j in stray_runs({("ns", j.name): j for j in jobs}, known, keep=keep)] == strays


A, B, C = ("ns", "a"), ("ns", "b"), ("ns", "c")


@pytest.mark.parametrize(("before", "after", "changed"), [
    ({A: 1, B: 2}, {A: 1, B: 2}, set()),
    ({A: 1, B: 2}, {A: 1, B: 3}, {B}),
    ({A: 1, B: 2}, {A: 1}, {B}),
    ({A: 1}, {A: 1, C: 5}, {C}),
    ({A: 1, B: 2}, {B: 2, A: 1}, set()),
    ({A: 1, B: 2}, {B: 3, A: 1}, {B}),
    ({A: 1, B: 2}, {A: 1, C: 2}, {B, C}),
    ({}, {A: 1}, {A}),
    ({A: 1, B: 2}, {A: 1, B: 4, C: 5}, {B, C}),
    ({A: 1, B: 2}, {A: 1, C: 5, B: 2}, {C}),
    ({A: 1, B: 2, C: 3}, {A: 1, C: 3}, {B}),
], ids=["same", "one-replaced", "one-removed", "one-added", "same-in-another-order", "replaced-in-another-order",
        "same-length-other-keys", "from-nothing", "replaced-and-added-after", "added-between", "removed-between"])
def test_the_keys_changed_between_two_mappings_are_those_added_removed_or_unequal(before, after, changed):
    assert changed_keys(after, before) == changed


def test_an_entry_replaced_by_an_equal_value_is_not_a_change() -> None:
    assert changed_keys({A: job("a-r1", "u-a")}, {A: job("a-r1", "u-a")}) == set()


_KEYS = [("ns", f"s{i}-r1") for i in range(3)]
_OWNERS = [None, "u-s0", "u-s1"]


@given(st.data())
def test_the_strays_kept_from_pass_to_pass_are_those_a_walk_over_every_job_finds(data: st.DataObject) -> None:
    """`Strays` looks again only at what changed; after any sequence of passes it finds what `stray_runs` finds.
    Each pass changes a few of the Jobs (a changed one is a new object, an unchanged one keeps its object, as the
    watch cache keeps it), and which runs the SJs point at or were just launched."""
    kept, jobs = Strays(), {}
    known: frozenset[tuple[str, tuple[str, str]]] = frozenset()
    keep: frozenset[tuple[str, str]] = frozenset()
    for _ in range(data.draw(st.integers(1, 8))):
        for key in data.draw(st.lists(st.sampled_from(_KEYS), max_size=2)):
            if data.draw(st.booleans()):
                jobs.pop(key, None)
            else:
                jobs[key] = job(key[1], data.draw(st.sampled_from(_OWNERS)), deleting=data.draw(st.booleans()))
        pairs = [(job.owner, key) for key, job in jobs.items() if job.owner] or [("u-s0", _KEYS[0])]
        if data.draw(st.booleans()):
            known = known ^ frozenset(data.draw(st.lists(st.sampled_from(pairs), max_size=2)))
        if data.draw(st.booleans()):
            keep = keep ^ frozenset(data.draw(st.lists(st.sampled_from(_KEYS), max_size=2)))
        found = kept.update(dict(jobs), known, keep)
        assert sorted(j.name for j in found) == sorted(j.name for j in stray_runs(jobs, known, keep=keep))


def _view(*jobs: JobView, pods: tuple[PodView, ...] = ()) -> ClusterView:
    return ClusterView(sjs=(), jobs={(j.namespace, j.name): j for j in jobs},
                       run_pods={("ns", "work-r1"): pods} if pods else {}, active_pods=pods, nodes=())


SJ = SJObject(namespace="ns", name="work", uid="u-work", generation=1, resource_version="1", created=NOW,
              deleting=False, spec={"image": "busybox"}, status={})
POD = PodView(namespace="ns", name="work-r1-0", uid="p", sj="work", run="work-r1", node="n1", phase="Running",
              deleting=False, all_running=True, requests={"cpu": 1000})


@pytest.mark.parametrize(("owner", "taken"), [("u-work", True), (None, False), ("u-other", False)])
def test_a_job_of_the_runs_name_is_the_sjs_run_only_when_the_sj_controls_it(owner, taken):
    found = job("work-r1", owner)
    seen = observe_one(SJ, "1", {}, parse_status({}), None, _view(found, pods=(POD,)),  # type: ignore[arg-type]
                       ("ns", "work-r1"))
    assert (seen.run.job is found, seen.run.pods == (POD,)) == (taken, taken)


def test_the_watch_shows_the_owner_of_a_job():
    body = {"metadata": {"namespace": "ns", "name": "work-r1", "uid": "j", "ownerReferences": [SJ_REF]}}
    assert job_view(body).owner == "u-work"
    assert job_view({"metadata": {"namespace": "ns", "name": "work-r1", "uid": "j"}}).owner is None


S = timedelta(seconds=1)


@pytest.mark.parametrize(("first", "times", "cap", "wait"), [
    (10 * S, 0, 600 * S, 0 * S),
    (10 * S, -1, 600 * S, 0 * S),
    (10 * S, 1, 600 * S, 10 * S),
    (10 * S, 2, 600 * S, 20 * S),
    (10 * S, 4, 600 * S, 80 * S),
    (10 * S, 7, 600 * S, 600 * S),
    (10 * S, 10_000, 600 * S, 600 * S),
    (0 * S, 3, 600 * S, 0 * S),
])
def test_a_wait_doubles_per_failure_in_a_row_up_to_its_cap(first, times, cap, wait):
    assert capped_doubling(first, times, cap) == wait


def test_start_timeouts_refusals_and_wasted_runs_back_off_alike():
    cfg = LifecycleConfig(retry_backoff=10 * S, max_retry_backoff=60 * S, thrash_backoff=5 * S,
                          max_thrash_backoff=15 * S)
    assert [retry_delay(n, cfg) for n in range(5)] == [0 * S, 10 * S, 20 * S, 40 * S, 60 * S]
    assert [thrash_delay(n, cfg) for n in range(4)] == [0 * S, 5 * S, 10 * S, 15 * S]
    assert thrash_delay(3, LifecycleConfig(thrash_backoff=0 * S)) == 0 * S


@pytest.mark.parametrize(("message", "reason"), [
    ('pods "w" is forbidden: exceeded quota: small, requested: cpu=1, used: cpu=0, limited: cpu=500m', "QuotaExceeded"),
    ('jobs.batch "w" is forbidden: exceeded quota: jobs, requested: count/jobs.batch=1', "QuotaExceeded"),
    ('pods "w" is forbidden: violates PodSecurity "restricted:latest"', "BackingOff"),
    ("jobs.batch \"w\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request", "BackingOff"),
])
def test_a_refusal_is_a_quota_when_the_server_says_so_else_a_backoff(message, reason):
    assert refusal_reason(message) == reason
