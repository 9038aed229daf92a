"""The operator's own watch caches (sj_operator.caches) and the raw watch's line splitting
(sj_operator.kube.split_lines): what the loop reads after each kind of event, when it is woken, and how the
list-and-watch cycle recovers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sj_operator.caches import JOBS_PATH, PODS_PATH, RESOURCE_QUOTAS_PATH, SJS_PATH, ObjectCache, PodCache
from sj_operator.kube import Gone, KubeError, split_lines
from sj_operator.observed import JobView, PodView, SJObject, job_view, remember_disrupted, sj_object
from sj_operator.policy.tenancy import ResourceQuotaView, resource_quota_view


def raw(name: str, *, run: str | None = None, phase: str = "Running", node: str | None = "n1",
        deleting: bool = False, disrupted: bool = False, rv: str = "1", cpu: str = "1") -> dict[str, Any]:
    labels = {"scavenger.dev/job-name": "sj", "scavenger.dev/run": run} if run else {}
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": labels,
                            "resourceVersion": rv}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if disrupted:
        status["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": status}


class Recorder:
    def __init__(self) -> None:
        self.wakes = 0
        self.disrupted: dict[Any, PodView] = {}

    def cache(self) -> PodCache:
        return PodCache(on_change=self.wake, remember=lambda pod: remember_disrupted(self.disrupted, pod))

    def wake(self) -> None:
        self.wakes += 1


def names(pods: tuple[PodView, ...]) -> list[str]:
    return sorted(p.name for p in pods)


# (events applied in order, active pods after, runs after {run: members}, wakes)
CASES: list[tuple[str, list[tuple[str, dict[str, Any]]], list[str], dict[str, list[str]], int]] = [
    ("another workload's pod holds room and does not wake the loop",
     [("ADDED", raw("web"))], ["web"], {}, 0),
    ("a run member is indexed by its run and wakes the loop",
     [("ADDED", raw("a-0", run="a-r1"))], ["a-0"], {"a-r1": ["a-0"]}, 1),
    ("a member that finished holds no room but stays in its run",
     [("ADDED", raw("a-0", run="a-r1")), ("MODIFIED", raw("a-0", run="a-r1", phase="Succeeded", rv="2"))],
     [], {"a-r1": ["a-0"]}, 2),
    ("a member moves between runs only by its labels",
     [("ADDED", raw("a-0", run="a-r1")), ("MODIFIED", raw("a-0", run="a-r2", rv="2"))],
     ["a-0"], {"a-r2": ["a-0"]}, 2),
    ("a pod that stops frees room and wakes the loop",
     [("ADDED", raw("web")), ("MODIFIED", raw("web", phase="Failed", rv="2"))], [], {}, 1),
    ("a pod deleted while holding room wakes the loop",
     [("ADDED", raw("web")), ("DELETED", raw("web", rv="2"))], [], {}, 1),
    ("a stopped pod's deletion does not",
     [("ADDED", raw("web", phase="Succeeded")), ("DELETED", raw("web", phase="Succeeded", rv="2"))], [], {}, 1),
    ("a deleted member leaves its run",
     [("ADDED", raw("a-0", run="a-r1")), ("ADDED", raw("a-1", run="a-r1")), ("DELETED", raw("a-0", run="a-r1"))],
     ["a-1"], {"a-r1": ["a-1"]}, 3),
    ("the same view again changes nothing and wakes nobody",
     [("ADDED", raw("a-0", run="a-r1")), ("MODIFIED", raw("a-0", run="a-r1"))], ["a-0"], {"a-r1": ["a-0"]}, 1),
    ("a bookmark changes nothing",
     [("ADDED", raw("web")), ("BOOKMARK", {"metadata": {"resourceVersion": "9"}})], ["web"], {}, 0),
]


@pytest.mark.parametrize(("events", "active", "runs", "wakes"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_events(events: list[tuple[str, dict[str, Any]]], active: list[str], runs: dict[str, list[str]],
                wakes: int) -> None:
    rec = Recorder()
    cache = rec.cache()
    for kind, obj in events:
        cache.apply(kind, obj)
    assert names(cache.active()) == active
    assert {run: names(members) for (_, run), members in cache.runs().items()} == runs
    assert rec.wakes == wakes
    assert cache.resource_version == events[-1][1]["metadata"]["resourceVersion"]


def test_the_runs_keep_their_place_and_an_unchanged_runs_members_are_the_same_tuple() -> None:
    """What a pass reads of the runs' members between two watch events: a run whose only member changed keeps its
    place among the runs (a pass compares the two passes' runs by identity, `decide.changed_keys`), an unchanged
    run is the same tuple, a changed one a new tuple, an emptied one gone; each call gives its own copy."""
    cache = Recorder().cache()
    for name, run in (("a-0", "a-r1"), ("b-0", "b-r1"), ("c-0", "c-r1")):
        cache.apply("ADDED", raw(name, run=run, phase="Pending"))
    first = cache.runs()
    cache.apply("MODIFIED", raw("a-0", run="a-r1", rv="2"))
    second = cache.runs()
    assert list(second) == list(first) == [("ns", "a-r1"), ("ns", "b-r1"), ("ns", "c-r1")]
    assert second[("ns", "b-r1")] is first[("ns", "b-r1")] and second[("ns", "c-r1")] is first[("ns", "c-r1")]
    assert [p.phase for p in second[("ns", "a-r1")]] == ["Running"] and second is not first
    cache.apply("DELETED", raw("b-0", run="b-r1", rv="3"))
    cache.apply("ADDED", raw("b-1", run="b-r2", rv="4"))
    third = cache.runs()
    assert list(third) == [("ns", "a-r1"), ("ns", "c-r1"), ("ns", "b-r2")]
    assert third[("ns", "a-r1")] is second[("ns", "a-r1")]
    cache.apply("MODIFIED", raw("a-0", run="a-r2", rv="5"))  # moved to another run by its labels
    assert {run: names(members) for (_, run), members in cache.runs().items()} == {
        "c-r1": ["c-0"], "b-r2": ["b-1"], "a-r2": ["a-0"]}


def test_a_disrupted_member_is_remembered_even_when_only_its_deletion_is_seen() -> None:
    rec = Recorder()
    cache = rec.cache()
    cache.apply("ADDED", raw("a-0", run="a-r1"))
    assert rec.disrupted == {}
    cache.apply("DELETED", raw("a-0", run="a-r1", disrupted=True, phase="Succeeded"))
    assert list(rec.disrupted) == [("ns", "a-r1", "uid-a-0")]
    assert cache.runs() == {}


def test_the_active_tuple_is_the_same_object_until_an_active_pod_changes() -> None:
    cache = Recorder().cache()
    cache.apply("ADDED", raw("web"))
    first = cache.active()
    cache.apply("MODIFIED", raw("web", rv="2"))  # same view: nothing changed
    assert cache.active() is first
    cache.apply("MODIFIED", raw("web", cpu="2", rv="3"))
    assert cache.active() is not first and cache.active()[0].requests["cpu"] == 2000


def test_a_listing_replaces_the_cache_and_keeps_unchanged_views() -> None:
    rec = Recorder()
    cache = rec.cache()
    for name in ("keep", "gone", "changed"):
        cache.apply("ADDED", raw(name))
    kept = cache.active()[0]
    cache.replace([raw("keep"), raw("changed", cpu="3"), raw("new")])
    assert names(cache.active()) == ["changed", "keep", "new"]
    assert next(p for p in cache.active() if p.name == "keep") is kept
    assert next(p for p in cache.active() if p.name == "changed").requests["cpu"] == 3000
    assert len(cache) == 3
    assert rec.wakes == 1  # the pod gone held room


# --- Jobs ----------------------------------------------------------------------------------------------

def raw_job(name: str, *, rv: str = "1", failed: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}] if failed else []
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv,
                         "labels": {"scavenger.dev/job-name": "sj"}},
            "status": {"conditions": conditions}}


def test_jobs_by_namespace_and_name_each_change_wakes_the_loop_and_a_pass_reads_a_copy() -> None:
    rec = Recorder()
    cache: ObjectCache[JobView] = ObjectCache(path=JOBS_PATH, selector="scavenger.dev/job-name",
                                              on_change=rec.wake, make=job_view)
    cache.apply("ADDED", raw_job("a-r1"))
    cache.apply("ADDED", raw_job("b-r1"))
    seen = cache.objects()
    cache.apply("MODIFIED", raw_job("a-r1", rv="2", failed=True))
    cache.apply("MODIFIED", raw_job("b-r1", rv="3"))  # nothing a view keeps changed
    cache.apply("DELETED", raw_job("b-r1", rv="4"))
    cache.apply("DELETED", raw_job("b-r1", rv="5"))  # gone already
    assert {k: v.failed for k, v in cache.objects().items()} == {("ns", "a-r1"): True}
    assert {k: v.failed for k, v in seen.items()} == {("ns", "a-r1"): False, ("ns", "b-r1"): False}
    assert rec.wakes == 4 and cache.resource_version == "5" and len(cache) == 1

    cache.replace([raw_job("c-r1"), raw_job("a-r1", failed=True)])
    assert sorted(cache.objects()) == [("ns", "a-r1"), ("ns", "c-r1")]
    assert rec.wakes == 5  # c-r1 came; a-r1 is as it was


def raw_sj(name: str, *, rv: str = "1", phase: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "scavenger.dev/v1alpha1", "kind": "ScavengerJob",
            "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "resourceVersion": rv,
                         "generation": 1, "creationTimestamp": "2026-11-27T08:00:00Z"},
            "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}},
            "status": {"phase": phase} if phase else {}}


def test_sjs_are_the_loops_view_of_each_one_changed_versions_wake_it_and_deleted_ones_leave() -> None:
    rec = Recorder()
    cache: ObjectCache[SJObject] = ObjectCache(path=SJS_PATH, on_change=rec.wake, make=sj_object)
    cache.replace([raw_sj("a"), raw_sj("b")])
    cache.apply("MODIFIED", raw_sj("a", rv="2", phase="Running"))
    cache.apply("MODIFIED", raw_sj("a", rv="2", phase="Running"))  # the same object again: no wake
    cache.apply("DELETED", raw_sj("b", rv="3"))
    sjs = cache.objects()
    assert SJS_PATH == "/apis/scavenger.dev/v1alpha1/scavengerjobs"
    assert list(sjs) == [("team", "a")] and sjs["team", "a"] == sj_object(raw_sj("a", rv="2", phase="Running"))
    assert sjs["team", "a"].status == {"phase": "Running"} and sjs["team", "a"].resource_version == "2"
    assert rec.wakes == 4 and cache.resource_version == "3"


def raw_quota(namespace: str, name: str, used_cpu: str, rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": rv},
            "spec": {"hard": {"requests.cpu": "8"}},
            "status": {"hard": {"requests.cpu": "8"}, "used": {"requests.cpu": used_cpu}}}


def test_resource_quotas_are_read_by_namespace_with_their_latest_usage() -> None:
    """What a gang's launch reads: each quota of its namespace as its last status shows it, none of the
    others'."""
    cache: ObjectCache[ResourceQuotaView] = ObjectCache(path=RESOURCE_QUOTAS_PATH, make=resource_quota_view)
    cache.replace([raw_quota("team-a", "cpu", "1"), raw_quota("team-a", "pods", "0"), raw_quota("team-b", "cpu", "2")])
    cache.apply("MODIFIED", raw_quota("team-a", "cpu", "3500m", rv="2"))
    cache.apply("DELETED", raw_quota("team-a", "pods", "0", rv="3"))
    assert RESOURCE_QUOTAS_PATH == "/api/v1/resourcequotas"
    assert cache.in_namespace("team-a") == [ResourceQuotaView(namespace="team-a", name="cpu",
                                                              hard={"requests.cpu": 8000}, used={"requests.cpu": 3500})]
    assert [q.name for q in cache.in_namespace("team-b")] == ["cpu"] and cache.in_namespace("team-c") == []


def test_the_selector_goes_with_every_list_and_watch() -> None:
    kube = ScriptedKube([([raw_job("a-r1")], "10"), []])
    selectors: list[str | None] = []
    list_raw, watch_raw = kube.list_raw, kube.watch_raw

    async def listing(path: str, *, selector: str | None = None) -> tuple[list[dict[str, Any]], str]:
        selectors.append(selector)
        return await list_raw(path, selector=selector)

    def watching(path: str, resource_version: str, *,
                 selector: str | None = None) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        selectors.append(selector)
        return watch_raw(path, resource_version, selector=selector)

    kube.list_raw, kube.watch_raw = listing, watching  # type: ignore[method-assign]
    cache: ObjectCache[JobView] = ObjectCache(path=JOBS_PATH, selector="scavenger.dev/job-name", make=job_view)

    async def main() -> None:
        with pytest.raises(asyncio.CancelledError):
            await cache.run(kube)  # type: ignore[arg-type]

    asyncio.run(main())
    assert selectors == ["scavenger.dev/job-name"] * 3 and len(cache) == 1


# --- split_lines -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("chunks", "lines", "left"), [
    ([b'{"a":1}\n'], [[b'{"a":1}']], b""),
    ([b'{"a":', b'1}\n{"b"', b':2}\n'], [[], [b'{"a":1}'], [b'{"b":2}']], b""),
    ([b'{"a":1}\n{"b":2}\n{"c"'], [[b'{"a":1}', b'{"b":2}']], b'{"c"'),
    ([b"\n\n{}\n"], [[b"{}"]], b""),
    ([b"x" * 300_000, b"\n"], [[], [b"x" * 300_000]], b""),  # a line longer than any reader's buffer
])
def test_split_lines(chunks: list[bytes], lines: list[list[bytes]], left: bytes) -> None:
    buffer = bytearray()
    assert [split_lines(buffer, chunk) for chunk in chunks] == lines
    assert bytes(buffer) == left


# --- the list-and-watch cycle against a scripted API --------------------------------------------------

class ScriptedKube:
    """Answers lists and watches from a script; each entry is a listing (items, version), a watch's events
    (a list, then the watch ends), or an exception raised by the next call."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.calls: list[str] = []

    def _next(self, what: str) -> Any:
        if not self.script:
            raise asyncio.CancelledError
        step = self.script.pop(0)
        if isinstance(step, Exception):
            self.calls.append(f"{what} failed")
            raise step
        return step

    async def list_raw(self, path: str, *, selector: str | None = None) -> tuple[list[dict[str, Any]], str]:
        items, version = self._next("list")
        self.calls.append(f"list -> {version}")
        return list(items), version

    async def watch_raw(self, path: str, resource_version: str, *,
                        selector: str | None = None) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        events = self._next(f"watch {resource_version}")
        self.calls.append(f"watch {resource_version}")
        for event in events:
            if isinstance(event, Exception):
                raise event
            yield event


def run_cache(script: list[Any]) -> tuple[PodCache, ScriptedKube, list[float]]:
    kube = ScriptedKube(script)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def main() -> PodCache:
        cache = PodCache()
        with pytest.raises(asyncio.CancelledError):
            await cache.run(kube, sleep=sleep)  # type: ignore[arg-type]
        return cache

    return asyncio.run(main()), kube, slept


def test_a_watch_the_server_ends_continues_from_the_last_version() -> None:
    cache, kube, slept = run_cache([
        ([raw("a")], "10"),
        [("ADDED", raw("b", rv="11")), ("BOOKMARK", {"metadata": {"resourceVersion": "15"}})],
        [("DELETED", raw("a", rv="16"))],
    ])
    assert kube.calls == ["list -> 10", "watch 10", "watch 15"]
    assert names(cache.active()) == ["b"] and cache.ready.is_set() and slept == []


def test_gone_lists_again_at_once() -> None:
    cache, kube, slept = run_cache([
        ([raw("a")], "10"),
        [("ADDED", raw("b", rv="11")), Gone(410, "Expired", "too old")],
        ([raw("c")], "20"),
        [],
    ])
    assert kube.calls == ["list -> 10", "watch 10", "list -> 20", "watch 20"]
    assert names(cache.active()) == ["c"] and slept == []


def test_failures_back_off_retry_the_watch_then_list_again() -> None:
    cache, kube, slept = run_cache([
        KubeError(0, "ClientConnectorError"),
        KubeError(403, "Forbidden"),
        ([raw("a")], "10"),
        KubeError(0, "ServerDisconnectedError"),
        [("ADDED", raw("b", rv="12"))],
        KubeError(500, "Internal"),
        KubeError(0, "ServerDisconnectedError"),
        ([raw("c")], "30"),
    ])
    assert kube.calls == ["list failed", "list failed", "list -> 10", "watch 10 failed", "watch 10",
                          "watch 12 failed", "watch 12 failed", "list -> 30"]
    assert slept == [1.0, 2.0, 1.0, 1.0, 2.0]
    assert names(cache.active()) == ["c"]


def test_ready_only_once_listed() -> None:
    cache, _, slept = run_cache([KubeError(403, "Forbidden"), KubeError(403, "Forbidden")])
    assert not cache.ready.is_set() and slept == [1.0, 2.0]


def test_each_cache_watches_its_own_kind_by_default() -> None:
    assert (PodCache().path, ObjectCache(make=job_view).path) == (PODS_PATH, JOBS_PATH)
