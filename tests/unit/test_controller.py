"""The decision loop's I/O step against a fake API: what it writes, in which order, and that an
API failure or a stale cache never loses or duplicates an SJ."""
from __future__ import annotations

import asyncio
import base64
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sj_operator.builders.service import build_gang_endpoints, gang_members
from sj_operator.config import OperatorConfig
from sj_operator.controller import Controller
from sj_operator.decide import ClusterView, Decided, Observed
from sj_operator.kube import Conflict, EventRef, Forbidden, Invalid, KubeError, NameTaken, NotFound
from sj_operator.names import controlled_by, controller_uid, owner_reference
from sj_operator.observed import JobView, NodeInfo, PodView, SJObject, job_view
from sj_operator.pacing import EVENT_DEFERRAL, EVENT_QUIET
from sj_operator.policy.outcomes import Event
from sj_operator.policy.tenancy import resource_quota_view
from sj_operator.write.steering import SET_ASIDE
from sj_operator.write.writer import BUDGET_REFRESH, PROTECTION_RETRY
from tests.unit.helpers import settled_pass

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


class FakeKube:
    """Records calls; `fail` maps a method name to the errors its next calls raise."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail: dict[str, list[Exception]] = {}
        self.events: list[tuple[str, str]] = []
        self.stamped: list[tuple[str, str, datetime | None]] = []
        self.absent: set[tuple[str, str]] = set()
        self.rv = 100
        self.dry_runs: list[dict[str, Any]] = []
        self.quotas: list[dict[str, Any]] = []
        self.made: dict[str, dict[str, Any]] = {}
        self.messages: list[tuple[str, str, str]] = []
        """The Jobs created, by name."""
        self.budgets: list[dict[str, Any]] = []
        """The PodDisruptionBudgets applied, in order."""
        self.secrets: list[dict[str, Any]] = []
        """The Secrets created, in order."""
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        """What the API server holds of the SJs' kinds (Job, Service, ConfigMap, Secret, budget), by kind and
        name: what this fake made, and what a test put there (someone else's object of a run's name)."""
        self.patches: list[tuple[str, str, Any, str]] = []
        self.deletes: list[tuple[str, str, str]] = []
        """(kind, name, the uid of its precondition) of every delete."""

    def _maybe_fail(self, name: str) -> None:
        errors = self.fail.get(name)
        if errors:
            raise errors.pop(0)

    async def patch_sj_status(self, namespace, name, status, resource_version):
        self._maybe_fail("patch_sj_status")
        self.calls.append(("status", dict(status)))
        self.rv += 1
        return {"metadata": {"resourceVersion": str(self.rv)}, "status": dict(status)}

    async def dry_run_pod(self, pod):
        self.dry_runs.append(pod)  # every attempt, refused or not
        self._maybe_fail("dry_run_pod")

    async def create_child(self, body, owner_uid):
        """Makes one of an SJ's objects, as `Kube.create_child` does: the stored one when the SJ controls an
        object of its name (`objects`), `NameTaken` when it does not."""
        kind, meta = body["kind"], body["metadata"]
        self._maybe_fail(f"create_{kind.lower()}")
        existing = self.objects.get((kind, meta["name"]))
        if existing is not None:
            if not controlled_by(existing["metadata"], owner_uid):
                raise NameTaken(kind, meta["namespace"], meta["name"], controller_uid(existing["metadata"]))
            return existing
        self.calls.append(_CREATED[kind](body))
        if kind == "Job":
            self.made[meta["name"]] = body
        if kind == "PodDisruptionBudget":
            self.budgets.append(body)
        if kind == "Secret":
            self.secrets.append(body)
        self.rv += 1  # a fresh version: an object made again is not the one an earlier version was of
        self.objects[(kind, meta["name"])] = {**body, "metadata": {**meta, "uid": f"uid-{meta['name']}",
                                                                     "resourceVersion": str(self.rv)}}
        return None

    def job(self, name: str, created: datetime) -> JobView:
        """The Job made as the watch shows it, created at ``created`` and taken up by the Job controller then."""
        body = self.made[name]
        return job_view({**body, "metadata": {**body["metadata"], "uid": f"uid-{name}",
                                              "creationTimestamp": created.isoformat()},
                         "status": {"startTime": created.isoformat()}})

    async def read_child(self, kind, namespace, name):
        return self.objects.get((kind, name))

    async def patch_child(self, kind, namespace, name, patch, resource_version):
        """Patches a stored object as `Kube.patch_child` does: Conflict when it changed since
        ``resource_version``, NotFound when it is gone; the version it has after."""
        self.patches.append((kind, name, patch, resource_version))
        self._maybe_fail(f"patch_{kind.lower()}")
        stored = self.objects.get((kind, name))
        if stored is None:
            raise NotFound(404, "NotFound", f"{kind} {name}")
        if stored["metadata"].get("resourceVersion") != resource_version:
            raise Conflict(409, "Conflict", f"{kind} {name} changed since {resource_version}")
        if kind == "PodDisruptionBudget":
            self.calls.append(("pdb", name))
            self.budgets.append({**stored, **patch})
        elif kind == "ConfigMap":
            self.calls.append(("configmap", {**stored, **patch}))
        elif kind == "EndpointSlice":
            self.calls.append(("endpointslice-patch", patch))
        self.rv += 1
        labels = (patch.get("metadata") or {}).get("labels")
        meta = {**stored["metadata"], "resourceVersion": str(self.rv), **({"labels": labels} if labels else {})}
        self.objects[(kind, name)] = {**stored, **{k: v for k, v in patch.items() if k != "metadata"}, "metadata": meta}
        return str(self.rv)

    async def apply_child(self, body, owner_uid, patch, *, version=None, same=None):
        """As `Kube.apply_child` does it, with this fake's create, read and patch."""
        kind, meta = body["kind"], body["metadata"]
        if version is None:
            existing = await self.create_child(body, owner_uid)
            if existing is None:
                return self.objects[(kind, meta["name"])]["metadata"]["resourceVersion"]
            version = existing["metadata"]["resourceVersion"]
            if same is not None and same(existing):
                return version
        return await self.patch_child(kind, meta["namespace"], meta["name"], patch, version)

    async def delete_child(self, kind, namespace, name, uid):
        self.deletes.append((kind, name, uid))
        self.calls.append((f"delete-{kind.lower()}", name))
        return True

    async def delete_owned(self, kind, namespace, name, owner_uid):
        existing = self.objects.get((kind, name))
        if existing is None or not controlled_by(existing["metadata"], owner_uid):
            return False
        return await self.delete_child(kind, namespace, name, existing["metadata"]["uid"])

    async def exists(self, kind, namespace, name):
        return (kind, name) not in self.absent

    async def event(self, **kw):
        self.calls.append(("event", kw["reason"]))
        self.events.append((kw["name"], kw["reason"]))
        self.stamped.append((kw["name"], kw["reason"], kw.get("at")))
        self.messages.append((kw["name"], kw["reason"], kw["message"]))
        return EventRef(f"{kw['name']}.{len(self.events)}", f"uid-{len(self.events)}")

    async def update_event(self, namespace, event, *, count, last, message):
        self.calls.append(("event-update", (event.name, count)))
        return True

    async def label_pod(self, namespace, name, labels):
        self._maybe_fail("label_pod")
        self.calls.append(("label", (name, dict(labels))))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.calls]


_CREATED = {
    "Job": lambda body: ("job", body["metadata"]["name"]),
    "Service": lambda body: ("service", body["metadata"]["name"]),
    "Secret": lambda body: ("secret", body["metadata"]["name"]),
    "ConfigMap": lambda body: ("configmap", body),
    "PodDisruptionBudget": lambda body: ("pdb", body["metadata"]["name"]),
    "EndpointSlice": lambda body: ("endpointslice", body),
}
"""What `FakeKube.calls` records for a create of each kind."""


def owned_by(sj_name: str) -> list[dict[str, Any]]:
    """The ownerReferences of the objects the SJ of that name (made by `sj`, uid ``u-<name>``) controls."""
    return [owner_reference(sj_name, f"u-{sj_name}")]


def sj(status: dict[str, Any] | None = None, rv: str = "7", name: str = "work", created: datetime = NOW,
       cpu: str = "1", **spec: Any) -> SJObject:
    return SJObject(namespace="ns", name=name, uid=f"u-{name}", generation=1, resource_version=rv,
                    created=created, deleting=False,
                    spec={"image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}, **spec},
                    status=status or {})


def node(name: str = "n1", ready: bool = True) -> NodeInfo:
    return NodeInfo(name=name, allocatable={"cpu": 8000, "memory": 32 * 2**30 * 1000, "pods": 110_000},
                    labels={}, taints=(), unschedulable=False, ready=ready)


def view(*sjs: SJObject, jobs: dict | None = None, run_pods: dict | None = None, active: tuple = (),
         nodes: tuple[NodeInfo, ...] | None = None) -> ClusterView:
    return ClusterView(sjs=sjs, jobs=jobs or {}, run_pods=run_pods or {}, active_pods=active,
                       nodes=(node(),) if nodes is None else nodes)


def run(controller: Controller, v: ClusterView) -> None:
    asyncio.run(settled_pass(controller, v))


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def controller(kube: FakeKube) -> Controller:
    """Reads the namespace's ResourceQuotas from ``kube.quotas`` (the operator: from its watch cache)."""
    return Controller(kube, OperatorConfig(), clock=lambda: NOW,  # type: ignore[arg-type]
                      resource_quotas=lambda namespace: [resource_quota_view(q) for q in kube.quotas])


def test_new_sj_that_fits_is_launched_at_first_sight_and_runs_after_four_writes(kube):
    """Four writes (and the pods' dry run) from a new SJ to Running: its Job and the Launched Event; once its
    pod runs and launches have paused, its status (straight to Running: the run is recorded with what its
    pods show) and the Running Event. No budget yet: that is made when the run is first protected."""
    t = [100.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: t[0])  # type: ignore[arg-type]
    run(controller, view(sj()))
    assert kube.calls == [("job", "work-r1"), ("event", "Launched")] and len(kube.dry_runs) == 1
    # The watch has not shown the Job yet: the run this process made stands for it (not launched again).
    run(controller, view(sj()))
    assert kube.calls == [("job", "work-r1"), ("event", "Launched")]
    made = kube.job("work-r1", created=NOW)
    pod = PodView(namespace="ns", name="work-r1-0", uid="p", sj="work", run="work-r1", node="n1", phase="Running",
                  deleting=False, all_running=True, requests={"cpu": 1000})
    ran = view(sj(), jobs={("ns", "work-r1"): made}, run_pods={("ns", "work-r1"): (pod,)}, active=(pod,))
    run(controller, ran)  # a run was launched less than EVENT_QUIET ago: the record waits for launches to pause
    assert kube.kinds() == ["job", "event"]
    t[0] += EVENT_QUIET
    run(controller, ran)
    assert kube.kinds() == ["job", "event", "status", "event"] and kube.calls[3] == ("event", "Running")
    written = kube.calls[2][1]
    assert (written["phase"], written["jobName"], written["attempt"]) == ("Running", "work-r1", 1)
    assert {c["type"]: c["status"] for c in written["conditions"]}["Admitted"] == "True"


def test_a_launch_does_not_wait_behind_the_other_sjs_writes_of_its_pass():
    """In a burst a pass writes hundreds of reasons and transitions: the Job of an admitted SJ is made while
    another SJ's status write is still held (before, the pass wrote every other SJ first)."""

    class Held(FakeKube):
        def __init__(self) -> None:
            super().__init__()
            self.gate = asyncio.Event()

        async def patch_sj_status(self, namespace, name, status, resource_version):
            if name == "huge":
                await self.gate.wait()
            return await super().patch_sj_status(namespace, name, status, resource_version)

    kube = Held()
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]

    async def pass_() -> None:
        reconciling = asyncio.create_task(controller.reconcile(view(sj(name="huge", cpu="64"), sj())))
        for _ in range(100):
            if ("job", "work-r1") in kube.calls:
                break
            await asyncio.sleep(0)
        assert ("job", "work-r1") in kube.calls and not reconciling.done()
        kube.gate.set()
        await reconciling
        await controller.settle()

    asyncio.run(pass_())
    assert [c[1]["phase"] for c in kube.calls if c[0] == "status"] == ["Pending"], "a launch writes no status"


def test_a_new_sj_whose_launch_fails_is_queued_on_the_next_pass(controller, kube):
    kube.fail["create_job"] = [KubeError(500, "boom")]
    run(controller, view(sj()))
    assert kube.kinds() == [], "nothing written: the launch is retried"
    run(controller, view(sj()))
    assert kube.kinds() == ["job", "event"] and kube.calls[1] == ("event", "Launched")


def test_failed_launch_leaves_the_sj_waiting_and_a_later_pass_launches_it(controller, kube):
    pending = sj({"phase": "Pending", "interruptedCount": 0})
    kube.fail["create_job"] = [KubeError(503, "Service Unavailable")]
    run(controller, view(pending))
    assert "status" not in kube.kinds(), "nothing recorded for a run that was not created"
    run(controller, view(pending))
    assert ("job", "work-r1") in kube.calls and ("event", "Launched") in kube.calls


def test_status_conflict_writes_nothing_else_and_the_next_pass_decides_again(controller, kube):
    kube.fail["patch_sj_status"] = [Conflict(409, "Conflict")]
    run(controller, view(sj(cpu="7")))  # does not fit: queued, saying why
    assert kube.kinds() == [], "a decision on stale data is dropped whole"
    run(controller, view(sj(rv="9", cpu="7")))
    assert kube.calls[0][1]["phase"] == "Pending"


def test_a_run_left_unrecorded_by_a_process_that_stopped_is_recorded_by_the_next_not_launched_again(kube):
    first = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    run(first, view(sj()))
    assert kube.kinds() == ["job", "event"], "the Job and its Event; no status yet"
    later = NOW + timedelta(minutes=1)
    second = Controller(kube, OperatorConfig(), clock=lambda: later)  # type: ignore[arg-type]
    run(second, view(sj(), jobs={("ns", "work-r1"): kube.job("work-r1", created=NOW)}))
    assert kube.kinds().count("job") == 1
    assert stored_status(kube)["jobName"] == "work-r1" and stored_status(kube)["phase"] == "Starting"
    assert stored_status(kube)["launchedTimestamp"] == "2026-11-22T12:00:00Z"


def test_a_run_another_decider_already_made_is_kept_without_its_event_or_count(controller, kube):
    """Two active deciders (separate Leases) may both admit an SJ: the second create finds the run made, and
    the launch is the first one's (one Launched Event, one count)."""
    kube.objects[("Job", "work-r1")] = {"kind": "Job", "metadata": {
        "namespace": "ns", "name": "work-r1", "uid": "k", "resourceVersion": "5", "ownerReferences": owned_by("work")}}
    run(controller, view(sj()))
    assert kube.kinds() == [] and controller.metrics.launched._value.get() == 0
    assert controller.held == {}
    run(controller, view(sj()))
    assert kube.kinds() == [], "not launched again: the run stands for itself until the watch shows it"


class LostAnswer(FakeKube):
    """The API server stores the Job but its answer is lost: the create, retried, is refused as existing (as
    `Kube.create_child` then returns the Job stored)."""

    async def create_child(self, body, owner_uid):
        if body["kind"] == "Job" and ("Job", body["metadata"]["name"]) not in self.objects:
            await super().create_child(body, owner_uid)
        return await super().create_child(body, owner_uid)


def test_a_run_whose_create_was_stored_though_its_answer_was_lost_is_this_launchs():
    """The Job found is the one this launch made (its launch annotation is this launch's): one Launched Event and
    one count, as if the first answer had come back."""
    kube = LostAnswer()
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    run(controller, view(sj()))
    assert kube.kinds() == ["job", "event"] and controller.metrics.launched._value.get() == 1
    assert len(kube.made["work-r1"]["metadata"]["annotations"]["scavenger.dev/launch"]) == 32


def test_stale_cache_after_a_launch_does_not_launch_twice(controller, kube):
    pending = sj({"phase": "Pending", "interruptedCount": 0})
    run(controller, view(pending))
    assert kube.kinds().count("job") == 1
    # The watch has not delivered the status write yet: the same stale SJ is seen again.
    run(controller, view(pending))
    assert kube.kinds().count("job") == 1


def test_a_run_whose_sj_is_gone_is_deleted_with_its_service_but_a_just_launched_one_is_kept(controller, kube):
    stray = job_view({"metadata": {"namespace": "ns", "name": "gone-r3", "uid": "j",
                                   "labels": {"scavenger.dev/job-name": "gone"},
                                   "ownerReferences": owned_by("gone")}})
    kube.objects[("Service", "gone-r3")] = {"kind": "Service", "metadata": {
        "namespace": "ns", "name": "gone-r3", "uid": "s", "ownerReferences": owned_by("gone")}}
    launched = job_view({"metadata": {"namespace": "ns", "name": "work-r1", "uid": "k",
                                      "labels": {"scavenger.dev/job-name": "work"},
                                      "ownerReferences": owned_by("work")},
                         "status": {"startTime": (NOW - timedelta(minutes=1)).isoformat()}})
    # work-r1 exists but the SJ's status does not name it yet (its write was lost): it is recorded.
    run(controller, view(sj({"phase": "Pending", "interruptedCount": 0}),
                         jobs={("ns", "gone-r3"): stray, ("ns", "work-r1"): launched}))
    assert kube.deletes == [("Job", "gone-r3", "j"), ("Service", "gone-r3", "s")], "each with its uid as precondition"
    assert kube.kinds().count("job") == 0
    recorded = [c[1] for c in kube.calls if c[0] == "status"][-1]
    assert recorded["phase"] == "Starting" and recorded["jobName"] == "work-r1" and recorded["attempt"] == 1


def _gang_pods(*ips: str | None, name: str = "work") -> tuple[PodView, ...]:
    return tuple(PodView(namespace="ns", name=f"{name}-r1-{i}-x", uid=f"p{i}", sj=name, run=f"{name}-r1", node="n1",
                         phase="Running" if ip else "Pending", deleting=False, requests={"cpu": 1000},
                         all_running=bool(ip), index=i, ip=ip, hostname=f"{name}-r1-{i}") for i, ip in enumerate(ips))


def _gang_view(*ips: str | None, kind: str = "gang") -> ClusterView:
    """A gang SJ whose run work-r1 has a pod per address (None: not given one yet); ``kind`` "solo": its pods
    are not named under a Service (a run of one pod)."""
    status = {"phase": "Starting", "interruptedCount": 0, "attempt": 1, "jobName": "work-r1"}
    job = job_view({"metadata": {"namespace": "ns", "name": "work-r1", "uid": "j-work",
                                 "labels": {"scavenger.dev/job-name": "work"}, "ownerReferences": owned_by("work"),
                                 "creationTimestamp": NOW.isoformat()},
                    "status": {"startTime": NOW.isoformat()}})
    pods = _gang_pods(*ips)
    if kind == "solo":
        pods = tuple(replace(pod, hostname=None) for pod in pods)
    return view(sj(status, parallelism=len(ips)), jobs={("ns", "work-r1"): job}, run_pods={("ns", "work-r1"): pods},
                active=pods)


def _slices(kube: FakeKube) -> list[list[tuple[str, str]]]:
    """The endpoints (hostname, address) of each slice created or patched, in order."""
    return [[(e["hostname"], e["addresses"][0]) for e in body["endpoints"]]
            for kind, body in kube.calls if kind in ("endpointslice", "endpointslice-patch")]


def test_a_gangs_members_are_published_in_its_slice_once_per_change(controller, kube):
    """The Service has no selector: the operator writes its slice, from the pods it watches, once per change
    of its members (a pass that sees the same members writes nothing)."""
    run(controller, _gang_view(None, None))
    assert _slices(kube) == [], "no member has an address yet"
    run(controller, _gang_view("10.0.0.1", None))
    run(controller, _gang_view("10.0.0.1", None))
    run(controller, _gang_view("10.0.0.1", "10.0.0.2"))
    assert _slices(kube) == [[("work-r1-0", "10.0.0.1")], [("work-r1-0", "10.0.0.1"), ("work-r1-1", "10.0.0.2")]]
    [created] = [body for kind, body in kube.calls if kind == "endpointslice"]
    assert created["metadata"]["labels"]["kubernetes.io/service-name"] == "work-r1"
    assert controlled_by(created["metadata"], "u-work")


def test_a_run_of_one_pod_has_no_slice(controller, kube):
    run(controller, _gang_view("10.0.0.1", kind="solo"))
    assert _slices(kube) == []


def test_a_restarted_operator_finds_its_slice_as_stored_and_patches_it_only_when_it_differs(kube):
    for stored, patched in ((["10.0.0.1", "10.0.0.2"], []), (["10.0.0.9"], [[("work-r1-0", "10.0.0.1"),
                                                                            ("work-r1-1", "10.0.0.2")]])):
        kube.calls.clear()
        controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
        assert not controller.slices.written, "a fresh process: nothing known as written"
        kube.objects[("EndpointSlice", "work-r1")] = {**build_gang_endpoints(
            job_name="work-r1", namespace="ns", sj_name="work", sj_uid="u-work",
            members=gang_members(_gang_pods(*stored))), "kind": "EndpointSlice"}
        kube.objects[("EndpointSlice", "work-r1")]["metadata"]["resourceVersion"] = "5"
        run(controller, _gang_view("10.0.0.1", "10.0.0.2"))
        assert _slices(kube) == patched
        assert ("ns", "work-r1") in controller.slices.written


def test_someone_elses_slice_of_the_runs_name_is_never_patched_nor_tried_at_every_pass(controller, kube):
    kube.objects[("EndpointSlice", "work-r1")] = _foreign("EndpointSlice", "work-r1")
    run(controller, _gang_view("10.0.0.1", "10.0.0.2"))
    run(controller, _gang_view("10.0.0.1", "10.0.0.2"))
    assert _slices(kube) == [] and not [p for p in kube.patches if p[0] == "EndpointSlice"]


def test_a_slice_that_changed_since_this_process_wrote_it_is_read_and_patched_again(controller, kube):
    run(controller, _gang_view("10.0.0.1", None))
    kube.fail["patch_endpointslice"] = [Conflict(409, "Conflict")]
    run(controller, _gang_view("10.0.0.1", "10.0.0.2"))
    assert _slices(kube)[-1] == [("work-r1-0", "10.0.0.1"), ("work-r1-1", "10.0.0.2")]
    assert [p[0] for p in kube.patches].count("EndpointSlice") == 2, "refused once, then written"


def test_a_slice_that_changed_since_it_was_read_is_read_and_patched_again(kube):
    """A fresh process finds the slice as stored (version 5) and patches it as read: a Conflict (changed since
    the read) has it read and patched again."""
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    kube.objects[("EndpointSlice", "work-r1")] = {**build_gang_endpoints(
        job_name="work-r1", namespace="ns", sj_name="work", sj_uid="u-work",
        members=gang_members(_gang_pods("10.0.0.9"))), "kind": "EndpointSlice"}
    kube.objects[("EndpointSlice", "work-r1")]["metadata"]["resourceVersion"] = "5"
    kube.fail["patch_endpointslice"] = [Conflict(409, "Conflict")]
    run(controller, _gang_view("10.0.0.1", "10.0.0.2"))
    assert [p[3] for p in kube.patches if p[0] == "EndpointSlice"] == ["5", "5"], "each at the version read"
    assert _slices(kube) == [[("work-r1-0", "10.0.0.1"), ("work-r1-1", "10.0.0.2")]]


def test_a_slice_whose_namespace_is_gone_is_not_tried_again_until_its_members_change(controller, kube):
    kube.fail["create_endpointslice"] = [NotFound(404, "NotFound", 'namespaces "ns" not found')] * 2
    run(controller, _gang_view("10.0.0.1", None))
    assert len(kube.fail["create_endpointslice"]) == 1, "tried once"


def test_a_slice_someone_else_made_of_its_name_since_this_process_wrote_it_is_never_patched(controller, kube):
    """The run's slice was written, then replaced by someone else's object of its name: the patch at the version
    written is a Conflict, the slice is read again, found not the SJ's, and left alone."""
    run(controller, _gang_view("10.0.0.1", None))
    kube.objects[("EndpointSlice", "work-r1")] = theirs = _foreign("EndpointSlice", "work-r1")
    run(controller, _gang_view("10.0.0.1", "10.0.0.2"))
    assert kube.objects[("EndpointSlice", "work-r1")] is theirs
    assert [body for kind, body in kube.calls if kind == "endpointslice-patch"] == []


def test_a_version_written_for_one_sj_is_not_used_for_another_sj_of_its_name(controller, kube):
    """An SJ deleted and made again under its name has a run of the same name: the slice written for the first
    SJ is not patched at its version for the second; it is read (and, not the new SJ's, left alone)."""
    run(controller, _gang_view("10.0.0.1", None))
    again = _gang_view("10.0.0.1", "10.0.0.2")
    job = job_view({"metadata": {"namespace": "ns", "name": "work-r1", "uid": "j-work-again",
                                 "labels": {"scavenger.dev/job-name": "work"},
                                 "ownerReferences": [owner_reference("work", "u-work-again")],
                                 "creationTimestamp": NOW.isoformat()}, "status": {"startTime": NOW.isoformat()}})
    run(controller, replace(again, sjs=tuple(replace(o, uid="u-work-again") for o in again.sjs),
                            jobs={("ns", "work-r1"): job}))
    assert controller.slices.written[("ns", "work-r1")] == gang_members(_gang_pods("10.0.0.1", "10.0.0.2")), \
        "the new SJ's members were taken up (and given up on: the slice of their name is the first SJ's)"
    assert [p for p in kube.patches if p[0] == "EndpointSlice"] == [], "read, found the first SJ's, never patched"


def test_a_slice_this_process_wrote_is_patched_at_the_version_it_wrote_without_a_create_or_a_read(controller, kube):
    tries, create = [], kube.create_child

    async def counted(body, owner_uid):
        tries.append(body["kind"])
        return await create(body, owner_uid)

    kube.create_child, written = counted, []
    for ips in (("10.0.0.1", None, None), ("10.0.0.1", "10.0.0.2", None), ("10.0.0.1", "10.0.0.2", "10.0.0.3")):
        run(controller, _gang_view(*ips))
        written.append(kube.objects[("EndpointSlice", "work-r1")]["metadata"]["resourceVersion"])
    assert tries.count("EndpointSlice") == 1, "created once, then patched"
    assert [p[3] for p in kube.patches if p[0] == "EndpointSlice"] == written[:2], "each at the version written"
    assert [address for _, address in _slices(kube)[-1]] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


def test_a_slice_deleted_since_this_process_wrote_it_is_made_again(controller, kube):
    run(controller, _gang_view("10.0.0.1", None))
    del kube.objects[("EndpointSlice", "work-r1")]
    run(controller, _gang_view("10.0.0.1", "10.0.0.2"))
    made = [body for kind, body in kube.calls if kind == "endpointslice"]
    assert len(made) == 2 and [e["addresses"][0] for e in made[-1]["endpoints"]] == ["10.0.0.1", "10.0.0.2"]


def test_a_slice_the_api_server_refuses_is_not_tried_again_until_its_members_change(controller, kube):
    kube.fail["create_endpointslice"] = [Invalid(422, "Invalid", "bad"), Invalid(422, "Invalid", "bad")]
    run(controller, _gang_view("10.0.0.1", None))
    run(controller, _gang_view("10.0.0.1", None))
    assert len(kube.fail["create_endpointslice"]) == 1, "one try for those members"
    run(controller, _gang_view("10.0.0.1", "10.0.0.2"))
    assert not kube.fail["create_endpointslice"]


def test_a_deleted_runs_slice_goes_with_its_service(controller, kube):
    run(controller, _gang_view("10.0.0.1", "10.0.0.2"))
    kube.objects[("Service", "work-r1")] = {"kind": "Service", "metadata": {
        "namespace": "ns", "name": "work-r1", "uid": "s", "ownerReferences": owned_by("work")}}
    asyncio.run(controller.writer.delete_run("ns", "work-r1", "test", sj_uid="u-work"))
    assert [d[0] for d in kube.deletes] == ["Service", "EndpointSlice"]
    run(controller, _gang_view("10.0.0.1", "10.0.0.3"))  # the watch still shows its pods: not written again
    assert len(_slices(kube)) == 1


def _foreign(kind: str, name: str, owner: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Someone else's object of a run's name, as the API server holds it: no ownerReference of an SJ, or
    ``owner``."""
    meta: dict[str, Any] = {"namespace": "ns", "name": name, "uid": f"theirs-{name}", "resourceVersion": "3",
                            "labels": {"scavenger.dev/job-name": "work", "scavenger.dev/run": name}}
    if owner is not None:
        meta["ownerReferences"] = owner
    return {"kind": kind, "metadata": meta}


def test_a_users_job_labelled_like_a_run_and_their_service_of_its_name_are_never_deleted(controller, kube):
    """Neither a Job no SJ controls, nor one another controller owns, is a stray, whatever its labels say; nor is
    a Service of a stray run's name that the stray's SJ does not control."""
    mine = _foreign("Job", "mine-r1")
    other = _foreign("Job", "batch-r1", owner=[{"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly",
                                                "uid": "c", "controller": True}])
    stray = job_view({"metadata": {"namespace": "ns", "name": "gone-r2", "uid": "j",
                                   "labels": {"scavenger.dev/job-name": "gone"}, "ownerReferences": owned_by("gone")}})
    kube.objects[("Service", "mine-r1")] = _foreign("Service", "mine-r1")
    kube.objects[("Service", "gone-r2")] = _foreign("Service", "gone-r2")
    run(controller, view(jobs={("ns", "mine-r1"): job_view(mine), ("ns", "batch-r1"): job_view(other),
                               ("ns", "gone-r2"): stray}))
    assert kube.deletes == [("Job", "gone-r2", "j")], "only the stray Job its SJ controlled"


def test_a_run_deleted_by_its_sj_spares_someone_elses_job_that_took_its_name(controller, kube):
    """A running SJ whose run's Job was replaced by someone else's of the same name: that Job is not its run (the
    run is lost, the SJ interrupted), and deleting the run leaves the other Job alone."""
    status = {"phase": "Running", "interruptedCount": 0, "attempt": 1, "jobName": "work-r1",
              "launchedTimestamp": (NOW - timedelta(minutes=10)).isoformat(),
              "runningTimestamps": [(NOW - timedelta(minutes=9)).isoformat()],
              "priorityStartOverTimestamp": (NOW - timedelta(minutes=9)).isoformat()}
    theirs = _foreign("Job", "work-r1")
    kube.objects[("Job", "work-r1")] = theirs
    kube.objects[("Service", "work-r1")] = _foreign("Service", "work-r1")
    run(controller, view(sj(status, cpu="7"), jobs={("ns", "work-r1"): job_view(theirs)}))
    written = stored_status(kube)
    assert written["interruptedCount"] == 1, written
    assert kube.deletes == [], "nothing of someone else's is deleted"


@pytest.mark.parametrize(("kind", "name", "spec"), [
    ("Job", "work-r1", {}),
    ("Service", "work-r1", {"parallelism": 2}),
    ("Secret", "work-mpi-ssh", {"parallelism": 2, "command": ["mpirun", "app"], "mpi": {"slotsPerWorker": 1}}),
    ("ConfigMap", "work-mpi-hostfile", {"parallelism": 2, "command": ["mpirun", "app"],
                                        "mpi": {"slotsPerWorker": 1}}),
])
def test_a_name_the_run_needs_held_by_someone_elses_object_makes_the_sj_wait_naming_it(kube, kind, name, spec):
    """A co-tenant's object of the run's name (their own ``authorized_keys`` Secret in the SJ's MPI gang, say) is
    never taken as the SJ's, patched or deleted: the SJ waits, Admitted=False NameTaken naming it, and is tried
    again after a doubling delay; nothing is made while it is held."""
    clock = [0.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: clock[0])  # type: ignore[arg-type]
    theirs = _foreign(kind, name)
    kube.objects[(kind, name)] = theirs
    jobs = {("ns", name): job_view(theirs)} if kind == "Job" else {}
    run(controller, view(sj(**spec), jobs=jobs))
    assert "job" not in kube.kinds() and kube.patches == [] and kube.deletes == []
    status = stored_status(kube)
    admitted = next(c for c in status["conditions"] if c["type"] == "Admitted")
    assert (status["phase"], admitted["status"], admitted["reason"]) == ("Pending", "False", "NameTaken")
    assert admitted["message"].startswith(f"{kind} ns/{name} exists and is not this SJ's (no ScavengerJob controls "
                                          "it)") and admitted["message"].endswith("(trying again in 10s)")
    assert ("work", "NameTaken") in kube.events
    assert controller.held["u-work"] == (10.0, 1)
    made = len(kube.calls)
    clock[0] = 9.0
    run(controller, view(sj(status=status, rv=str(kube.rv), **spec), jobs=jobs))
    assert len(kube.calls) == made, "held: nothing tried"
    clock[0] = 10.0
    run(controller, view(sj(status=status, rv=str(kube.rv), **spec), jobs=jobs))
    assert controller.held["u-work"] == (30.0, 2), "still taken: held twice as long"
    assert kube.objects[(kind, name)] is theirs and "job" not in kube.kinds()


def test_an_mpi_sjs_own_secret_is_reused_and_its_hostfile_patched_as_read(controller, kube):
    """From an earlier run: the SJ's ssh keys are kept, and its hostfile is patched at the version read (a
    ConfigMap of its name made by someone else meanwhile would fail the patch with Conflict)."""
    for kind, name in (("Secret", "work-mpi-ssh"), ("ConfigMap", "work-mpi-hostfile")):
        kube.objects[(kind, name)] = {"kind": kind, "metadata": {"namespace": "ns", "name": name, "uid": name,
                                                                 "resourceVersion": "8",
                                                                 "ownerReferences": owned_by("work")}}
    run(controller, view(sj(PENDING, parallelism=2, command=["mpirun", "app"], mpi={"slotsPerWorker": 1})))
    assert "secret" not in kube.kinds() and launched(kube) == ["work-r1"]
    [(kind, name, patch, version)] = kube.patches
    assert (kind, name, version) == ("ConfigMap", "work-mpi-hostfile", "8")
    assert "work-r1-1.work-r1" in patch["data"]["hostfile"]


# --- the loop's wiring: what it hands the pure core -------------------------------------------------

PENDING = {"phase": "Pending", "interruptedCount": 0}


def launched(kube: FakeKube) -> list[str]:
    return [name for kind, name in kube.calls if kind == "job"]


def test_queue_order_puts_the_interrupted_sj_first(controller, kube):
    """Room for one 4-CPU SJ (threshold 70 % of 8 CPU): the newer but interrupted SJ goes first."""
    older = sj(PENDING, name="older", created=NOW - timedelta(hours=1), cpu="4")
    interrupted = sj({"phase": "Interrupted", "interruptedCount": 2, "attempt": 2}, name="again", cpu="4")
    run(controller, view(older, interrupted))
    assert launched(kube) == ["again-r3"]


BACKING_OFF = {"phase": "Interrupted", "interruptedCount": 1, "attempt": 1, "jobName": "again-r1",
               "launchedTimestamp": (NOW - timedelta(minutes=2)).isoformat(), "notBefore": (NOW + 10 * S).isoformat()}
"""Its run was launched two minutes ago and has ended; it waits with a backoff until 10 s from now."""
AFTER_A_WASTED_RUN = {**BACKING_OFF, "wastedRuns": 1, "interruptedTimestamps": [(NOW - 20 * S).isoformat()]}
AFTER_A_START_TIMEOUT = {**BACKING_OFF, "startTimeouts": 1, "wastedRuns": 1,
                         "interruptedTimestamps": [(NOW - timedelta(minutes=5)).isoformat()]}
"""A wasted run long ago, then a run that timed out: its backoff is the start timeout's."""


@pytest.mark.parametrize(("backoff", "held"), [(AFTER_A_WASTED_RUN, True), (AFTER_A_START_TIMEOUT, False)],
                         ids=["wasted-run", "start-timeout"])
def test_the_room_an_sj_backing_off_after_a_wasted_run_would_take_is_held(kube, backoff, held):
    """Room for one 4-CPU SJ (70 % of 8 CPU). The SJ interrupted within its first checkpoint period backs off: a
    newer SJ that needs the same room waits, saying for whom it is held, and the interrupted one starts in it once
    its backoff has ended. After a start timeout nothing is held: the newer SJ starts."""
    t = [NOW]
    controller = Controller(kube, OperatorConfig(), clock=lambda: t[0])  # type: ignore[arg-type]
    again = sj(backoff, name="again", created=NOW - timedelta(hours=1), cpu="4")
    newer = sj(PENDING, name="newer", cpu="4")
    run(controller, view(again, newer))
    if not held:
        assert launched(kube) == ["newer-r1"]
        return
    assert launched(kube) == []
    [written] = [body for kind, body in kube.calls if kind == "status"]  # the newer SJ's reason; not the other's
    why = next(c for c in written["conditions"] if c["type"] == "Admitted")
    assert why["reason"] == "NoNodeFitsGang" and "the room it would take is held for ns/again" in why["message"]
    t[0] = NOW + 10 * S
    run(controller, view(again, newer))
    assert launched(kube) == ["again-r2"]


@pytest.mark.parametrize(("threshold", "started"), [(0.9, ["work-r1"]), (0.7, [])])
def test_the_configured_threshold_is_used(kube, threshold, started):
    controller = Controller(kube, OperatorConfig(threshold=threshold), clock=lambda: NOW)  # type: ignore[arg-type]
    run(controller, view(sj(PENDING, cpu="7")))
    assert launched(kube) == started


@pytest.mark.parametrize(("ready", "started"), [(True, ["work-r1"]), (False, [])])
def test_a_node_that_is_not_ready_takes_no_run(controller, kube, ready, started):
    run(controller, view(sj(PENDING), nodes=(node(ready=ready),)))
    assert launched(kube) == started


def _running_sj(name: str, period_start: datetime) -> tuple[SJObject, JobView, PodView]:
    job_name = f"{name}-r1"
    status = {"phase": "Running", "interruptedCount": 0, "attempt": 1, "jobName": job_name,
              "priorityStartOverTimestamp": period_start.isoformat(), "runningPriority": 1, "protected": True,
              "runningTimestamps": [period_start.isoformat()]}
    job = job_view({"metadata": {"namespace": "ns", "name": job_name, "uid": f"j-{name}",
                                 "labels": {"scavenger.dev/job-name": name},
                                 "ownerReferences": owned_by(name)}})
    pod = PodView(namespace="ns", name=f"{job_name}-0", uid=f"p-{name}", sj=name, run=job_name, node="n1",
                  phase="Running", deleting=False, requests={"cpu": 1000}, all_running=True, index=0,
                  protected=True)
    return sj(status, name=name, duration="10m", priorityLevels=3), job, pod


def test_steering_leaves_the_run_with_least_unsaved_work_in_its_current_period_unprotected(controller, kube):
    """Both runs are protected by level on one node. "old" started 25 min ago but its current 10-min
    period began 5 min ago; "young" began 7 min ago. The least unsaved work is old's: it is exempted."""
    old, old_job, old_pod = _running_sj("old", NOW - timedelta(minutes=25))
    young, young_job, young_pod = _running_sj("young", NOW - timedelta(minutes=7))
    run(controller, view(old, young, jobs={("ns", "old-r1"): old_job, ("ns", "young-r1"): young_job},
                         run_pods={("ns", "old-r1"): (old_pod,), ("ns", "young-r1"): (young_pod,)},
                         active=(old_pod, young_pod)))
    assert ("old", "Unprotected") in kube.events
    assert ("young", "Unprotected") not in kube.events
    assert ("label", ("old-r1-0", {"scavenger.dev/protected": "false"})) in kube.calls


def test_steering_exempts_nothing_while_a_run_is_below_the_protecting_level(controller, kube):
    """As above, plus "fresh", 1 minute into its period (level 0): it is the unprotected run the scheduler
    will prefer, so old and young both keep their protection."""
    runs = [_running_sj(name, NOW - timedelta(minutes=ago)) for name, ago in (("old", 25), ("young", 7), ("fresh", 1))]
    run(controller, view(*(s for s, _, _ in runs), jobs={("ns", j.name): j for _, j, _ in runs},
                         run_pods={("ns", j.name): (p,) for _, j, p in runs}, active=tuple(p for _, _, p in runs)))
    assert ("fresh", "Unprotected") in kube.events
    assert ("old", "Unprotected") not in kube.events
    assert ("young", "Unprotected") not in kube.events


@pytest.mark.parametrize(
    ("mpi", "hostfile"),
    [
        ({"slotsPerWorker": 4},
         "work-r1-1.work-r1.ns.svc.cluster.local slots=4\nwork-r1-2.work-r1.ns.svc.cluster.local slots=4\n"),
        ({"slotsPerWorker": 2, "implementation": "MPICH"},
         "work-r1-1.work-r1.ns.svc.cluster.local:2\nwork-r1-2.work-r1.ns.svc.cluster.local:2\n"),
    ],
    ids=["openmpi-slots", "mpich"],
)
def test_mpi_launch_writes_the_hostfile_the_spec_asks_for(controller, kube, mpi, hostfile):
    run(controller, view(sj(PENDING, parallelism=3, command=["mpirun", "app"], mpi=mpi)))
    configmaps = [body for kind, body in kube.calls if kind == "configmap"]
    assert len(configmaps) == 1
    assert configmaps[0]["data"]["hostfile"] == hostfile
    assert ("secret", "work-mpi-ssh") in kube.calls
    assert launched(kube) == ["work-r1"]


def test_mpi_launch_names_the_gang_in_the_configured_cluster_domain(kube):
    controller = Controller(kube, OperatorConfig(cluster_domain="corp.example"), clock=lambda: NOW)  # type: ignore[arg-type]
    run(controller, view(sj(PENDING, parallelism=3, command=["mpirun", "app"], mpi={"slotsPerWorker": 1})))
    hosts = [f"work-r1-{i}.work-r1.ns.svc.corp.example" for i in range(3)]
    configmaps = [body for kind, body in kube.calls if kind == "configmap"]
    assert [cm["data"]["hostfile"] for cm in configmaps] == [f"{hosts[1]} slots=1\n{hosts[2]} slots=1\n"]
    env = kube.made["work-r1"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "SJ_HOSTS"] == [",".join(hosts)]
    [secret] = kube.secrets
    known_hosts = base64.b64decode(secret["data"]["known_hosts"]).decode()
    host_public = base64.b64decode(secret["data"]["ssh_host_ed25519_key.pub"]).decode()
    assert known_hosts == f"*.ns.svc.corp.example {host_public}"


def test_an_existing_mpi_secret_is_not_made_again(controller, kube):
    kube.objects[("Secret", "work-mpi-ssh")] = {"kind": "Secret", "metadata": {
        "namespace": "ns", "name": "work-mpi-ssh", "uid": "s1", "ownerReferences": owned_by("work")}}
    run(controller, view(sj(PENDING, parallelism=3, command=["mpirun", "app"], mpi={"slotsPerWorker": 1})))
    assert kube.secrets == []
    assert launched(kube) == ["work-r1"]


# ----------------------------------------------------------------------------- what the namespace allows

def stored_status(kube: FakeKube) -> dict[str, Any]:
    """The status as the API server holds it after every merge patch written so far."""
    merged: dict[str, Any] = {}
    for kind, body in kube.calls:
        if kind == "status":
            merged.update(body)
    return {k: v for k, v in merged.items() if v is not None}


FORBIDDEN_PSS = ('pods "work-r1-x" is forbidden: violates PodSecurity "restricted:latest": runAsNonRoot != true '
                 '(pod or container "main" must set securityContext.runAsNonRoot=true)')


def test_the_run_is_tried_as_a_dry_run_pod_before_anything_is_made(controller, kube):
    run(controller, view(sj()))
    [pod] = kube.dry_runs
    assert pod["kind"] == "Pod" and pod["metadata"]["namespace"] == "ns"
    assert pod["metadata"]["generateName"] == "work-r1-"
    assert pod["spec"]["priorityClassName"] == "scavenger-band-0"
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(("message", "reason"), [
    (FORBIDDEN_PSS, "BackingOff"),
    ('pods "work-r1-x" is forbidden: exceeded quota: small, requested: cpu=1, used: cpu=0, limited: cpu=500m',
     "QuotaExceeded"),
])
def test_a_namespace_that_refuses_the_pods_makes_the_sj_wait_saying_why(controller, kube, message, reason):
    from sj_operator.kube import Forbidden
    kube.fail["dry_run_pod"] = [Forbidden(403, "Forbidden", message)]
    run(controller, view(sj()))
    assert "job" not in kube.kinds() and "pdb" not in kube.kinds(), "nothing is made"
    status = stored_status(kube)
    assert status["phase"] == "Pending"
    assert status["message"] == f"namespace ns refuses this SJ's pods: {message} (trying again in 10s)"
    admitted = next(c for c in status["conditions"] if c["type"] == "Admitted")
    assert (admitted["status"], admitted["reason"], admitted["message"]) == ("False", reason, status["message"])
    assert ("work", reason) in kube.events


def test_a_refused_sj_is_not_tried_again_before_its_delay_and_costs_no_writes(kube):
    from sj_operator.kube import Forbidden
    clock = [0.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: clock[0])  # type: ignore[arg-type]
    kube.fail["dry_run_pod"] = [Forbidden(403, "Forbidden", FORBIDDEN_PSS)]
    run(controller, view(sj()))
    written = sj(status=stored_status(kube), rv=str(kube.rv))
    kube.calls.clear()
    clock[0] = 9.0
    run(controller, view(written))
    assert kube.calls == [] and len(kube.dry_runs) == 1, "held: no dry run, no write"
    clock[0] = 10.5
    run(controller, view(written))
    assert len(kube.dry_runs) == 2 and "job" in kube.kinds(), "tried again after 10s, and it now fits"
    assert controller.held == {}


def test_the_retry_delay_doubles_per_refusal_in_a_row(kube):
    from sj_operator.kube import Forbidden
    clock = [0.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: clock[0])  # type: ignore[arg-type]
    delays = []
    for _ in range(4):
        kube.fail["dry_run_pod"] = [Forbidden(403, "Forbidden", FORBIDDEN_PSS)]
        run(controller, view(sj()))
        retry_at, _ = controller.held["u-work"]
        delays.append(retry_at - clock[0])
        clock[0] = retry_at
    assert delays == [10, 20, 40, 80]


JOB_QUOTA = ('jobs.batch "work-r1" is forbidden: exceeded quota: jobs, requested: count/jobs.batch=1, '
             'used: count/jobs.batch=2, limited: count/jobs.batch=2')
JOB_POLICY = ('jobs.batch "work-r1" is forbidden: ValidatingAdmissionPolicy \'no-big-jobs\' with binding '
              '\'no-big-jobs\' denied request: failed expression: object.spec.parallelism <= 1')


@pytest.mark.parametrize(("error", "what", "reason"), [
    (Forbidden(403, "Forbidden", JOB_QUOTA), "Job ns/work-r1 (403 Forbidden)", "QuotaExceeded"),
    (Invalid(422, "Unprocessable Entity", JOB_POLICY), "Job ns/work-r1 (422 Unprocessable Entity)", "BackingOff"),
], ids=["quota-on-jobs", "policy-on-jobs"])
def test_a_job_the_api_server_refuses_holds_the_sj_with_a_doubling_delay_saying_why(kube, error, what, reason):
    """A refusal the pods' dry run could not see (a ResourceQuota on ``count/jobs.batch``, a policy on Jobs) is
    held as a dry run's refusal is: Admitted=False naming what refused and the server's message, and no create
    until its delay has passed, which doubles per refusal in a row."""
    clock = [0.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: clock[0])  # type: ignore[arg-type]
    kube.fail["create_job"] = [error]
    run(controller, view(sj()))
    status = stored_status(kube)
    admitted = next(c for c in status["conditions"] if c["type"] == "Admitted")
    assert (status["phase"], admitted["status"], admitted["reason"]) == ("Pending", "False", reason)
    assert admitted["message"] == (f"the API server refused to create {what}: {error.message} "
                                   "(trying again in 10s)") == status["message"]
    assert (controller.held["u-work"], kube.kinds()) == ((10.0, 1), ["status", "event"])
    tries = len(kube.dry_runs)
    clock[0] = 9.0
    run(controller, view(sj(status, rv=str(kube.rv))))
    assert len(kube.dry_runs) == tries and kube.kinds() == ["status", "event"], "held: no create, no write"
    clock[0] = 10.0
    kube.fail["create_job"] = [error]
    run(controller, view(sj(status, rv=str(kube.rv))))
    assert controller.held["u-work"] == (30.0, 2), "refused again: twice as long"
    clock[0] = 30.0
    run(controller, view(sj(stored_status(kube), rv=str(kube.rv))))
    assert launched(kube) == ["work-r1"] and controller.held == {}


@pytest.mark.parametrize(("kind", "spec"), [
    ("service", {"parallelism": 2}),
    ("secret", {"parallelism": 2, "command": ["mpirun", "app"], "mpi": {"slotsPerWorker": 1}}),
    ("configmap", {"parallelism": 2, "command": ["mpirun", "app"], "mpi": {"slotsPerWorker": 1}}),
])
def test_any_object_of_a_run_the_api_server_refuses_holds_the_sj(controller, kube, kind, spec):
    kube.fail[f"create_{kind}"] = [Forbidden(403, "Forbidden", f"{kind}s is forbidden: exceeded quota: q")]
    run(controller, view(sj(**spec)))
    admitted = next(c for c in stored_status(kube)["conditions"] if c["type"] == "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "QuotaExceeded")
    verb = "write" if kind == "configmap" else "create"  # the hostfile is made or patched to this run's hosts
    assert f"the API server refused to {verb} " in admitted["message"] and "job" not in kube.kinds()


def test_an_earlier_runs_hostfile_the_api_server_refuses_to_patch_holds_the_sj(controller, kube):
    """The SJ's own hostfile from an earlier run is patched to this run's hosts; refused, the SJ is held as for
    a refused create (not failed for good), and no Job is made."""
    kube.objects[("ConfigMap", "work-mpi-hostfile")] = {"kind": "ConfigMap", "data": {}, "metadata": {
        "namespace": "ns", "name": "work-mpi-hostfile", "uid": "h", "resourceVersion": "4",
        "ownerReferences": owned_by("work")}}
    kube.fail["patch_configmap"] = [Forbidden(403, "Forbidden", "configmaps is forbidden: denied by a policy")]
    run(controller, view(sj(parallelism=2, command=["mpirun", "app"], mpi={"slotsPerWorker": 1})))
    status = stored_status(kube)
    admitted = next(c for c in status["conditions"] if c["type"] == "Admitted")
    assert (status["phase"], admitted["status"]) == ("Pending", "False")
    assert "the API server refused to write ConfigMap ns/work-mpi-hostfile" in admitted["message"]
    assert "job" not in kube.kinds()
    assert controller.held["u-work"][1] == 1


def test_a_gang_that_does_not_fit_the_namespace_quota_waits_with_the_numbers(controller, kube):
    kube.quotas = [{"metadata": {"name": "team"}, "status": {"hard": {"requests.cpu": "4", "pods": "10"},
                                                              "used": {"requests.cpu": "1500m", "pods": "2"}}}]
    run(controller, view(sj(parallelism=3)))
    assert "job" not in kube.kinds()
    status = stored_status(kube)
    assert status["message"].startswith("namespace ns has no room for the whole gang: ResourceQuota team: "
                                        "3 pod(s) need requests.cpu 3, 2500m of 4 is free")


def test_a_gang_that_fits_the_namespace_quota_launches(controller, kube):
    kube.quotas = [{"metadata": {"name": "team"}, "status": {"hard": {"requests.cpu": "4"},
                                                              "used": {"requests.cpu": "1"}}}]
    run(controller, view(sj(parallelism=3)))
    assert "job" in kube.kinds()


def test_the_start_timeout_counts_from_the_jobs_creation_not_from_the_pass(kube):
    # A pass whose API calls were retried for a while launches late: the launch is stamped when it happened.
    times = iter([NOW, NOW + timedelta(seconds=40), NOW + timedelta(seconds=41)])
    current = [NOW]

    def clock() -> datetime:
        current[0] = next(times, current[0])
        return current[0]

    t = [100.0]
    controller = Controller(kube, OperatorConfig(), clock=clock, monotonic=lambda: t[0])  # type: ignore[arg-type]
    run(controller, view(sj()))
    assert "status" not in kube.kinds()
    t[0] += EVENT_QUIET  # no launch since
    for _ in times:  # the clock stops at NOW + 55 s
        pass
    # Until the watch shows the Job, the run this process made stands for it, stamped when it was made; it is
    # not recorded before the Job controller has taken it up (which the watch shows), then past its grace as
    # Starting, launched when it was made.
    current[0] = NOW + timedelta(seconds=55)
    run(controller, view(sj()))
    assert "status" not in kube.kinds()
    made = kube.job("work-r1", NOW + timedelta(seconds=40))
    run(controller, view(sj(), jobs={("ns", "work-r1"): made}))
    assert stored_status(kube)["launchedTimestamp"] == "2026-11-22T12:00:40Z"
    assert stored_status(kube)["phase"] == "Starting"


def test_without_rbac_for_the_dry_run_the_sj_is_launched_anyway(controller, kube):
    # The operator's own permissions are not the namespace's rules: never hold an SJ for them.
    from sj_operator.kube import Forbidden
    kube.fail["dry_run_pod"] = [Forbidden(403, "Forbidden", 'pods is forbidden: User "system:serviceaccount:'
                                          'scavenger-system:scavenger-operator" cannot create resource "pods"')]
    run(controller, view(sj()))
    assert "job" in kube.kinds() and controller.held == {}


def test_a_run_protected_again_soon_toggles_its_pods_label_without_applying_the_budget_again(kube):
    """The budget is applied when a run is first protected; protecting it again within `BUDGET_REFRESH` only
    labels the pods; after it, the budget is applied again (it may have been deleted by hand). "old" shares
    the node and has less unsaved work, so steering leaves it unprotected and "young" is the one protected."""
    clock = [0.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: clock[0])  # type: ignore[arg-type]
    old, old_job, old_pod = _running_sj("old", NOW - timedelta(minutes=25))
    young, young_job, young_pod = _running_sj("young", NOW - timedelta(minutes=7))
    old = replace(old, status={**old.status, "protected": False})
    young = replace(young, status={**young.status, "protected": False})
    old_pod, young_pod = replace(old_pod, protected=False), replace(young_pod, protected=False)
    scene = {"jobs": {("ns", "old-r1"): old_job, ("ns", "young-r1"): young_job},
             "run_pods": {("ns", "old-r1"): (old_pod,), ("ns", "young-r1"): (young_pod,)},
             "active": (old_pod, young_pod)}
    labelled = ("label", ("young-r1-0", {"scavenger.dev/protected": "true"}))
    budgets = []
    for at in (0.0, BUDGET_REFRESH / 2, BUDGET_REFRESH + 1):
        clock[0] = at
        kube.calls.clear()
        run(controller, view(old, replace(young, resource_version=str(int(at) + 10)), **scene))
        assert labelled in kube.calls
        budgets.append(kube.calls.count(("pdb", "young-protect")))
    assert budgets == [1, 0, 1]


def test_a_protected_run_of_another_size_applies_the_budget_again_for_its_pods(kube):
    """The budget keeps every pod of the run (`minAvailable`): a run of another size (a fallback's gang) is
    protected only after the budget is applied again for its pods, even within `BUDGET_REFRESH`."""
    clock = [0.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: clock[0])  # type: ignore[arg-type]
    old, old_job, old_pod = _running_sj("old", NOW - timedelta(minutes=25))
    young, young_job, young_pod = _running_sj("young", NOW - timedelta(minutes=7))
    old = replace(old, status={**old.status, "protected": False})
    old_pod = replace(old_pod, protected=False)
    sizes = []
    for at, parallelism in ((0.0, 1), (BUDGET_REFRESH / 2, 3)):
        clock[0] = at
        pods = tuple(replace(young_pod, name=f"young-r1-{i}", uid=f"p-young-{i}", index=i, protected=False)
                     for i in range(parallelism))
        spec = {**young.spec, "parallelism": parallelism}
        current = replace(young, spec=spec, resource_version=str(int(at) + 10),
                          status={**young.status, "protected": False})
        kube.budgets.clear()
        run(controller, view(old, current, jobs={("ns", "old-r1"): old_job, ("ns", "young-r1"): young_job},
                             run_pods={("ns", "old-r1"): (old_pod,), ("ns", "young-r1"): pods},
                             active=(old_pod, *pods)))
        sizes += [b["spec"]["minAvailable"] for b in kube.budgets]
    assert sizes == [1, 3]


def test_someone_elses_budget_of_the_sjs_budget_name_is_neither_patched_nor_trusted(kube):
    """A budget named like the SJ's that the SJ does not control: not patched, and the run's pods are not
    labelled protected (that budget's selector is not the SJ's to rely on); a Warning says why."""
    old, old_job, old_pod = _running_sj("old", NOW - timedelta(minutes=25))
    young, young_job, young_pod = _running_sj("young", NOW - timedelta(minutes=7))
    young, young_pod = replace(young, status={**young.status, "protected": False}), replace(young_pod, protected=False)
    kube.objects[("PodDisruptionBudget", "young-protect")] = _foreign("PodDisruptionBudget", "young-protect")
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    run(controller, view(old, young, jobs={("ns", "old-r1"): old_job, ("ns", "young-r1"): young_job},
                         run_pods={("ns", "old-r1"): (old_pod,), ("ns", "young-r1"): (young_pod,)},
                         active=(old_pod, young_pod)))
    assert kube.patches == [] and kube.budgets == []
    assert ("label", ("young-r1-0", {"scavenger.dev/protected": "true"})) not in kube.calls
    [message] = [m for name, reason, m in kube.messages if (name, reason) == ("young", "NameTaken")]
    assert "PodDisruptionBudget ns/young-protect exists and is not this SJ's" in message


class Refusing(FakeKube):
    """`FakeKube` whose API server refuses a budget's create (``budget``) or a pod's label (``label``)."""

    def __init__(self, refuse: str) -> None:
        super().__init__()
        self.refuse = refuse

    async def create_child(self, body, owner_uid):
        if self.refuse == "budget" and body["kind"] == "PodDisruptionBudget":
            self.calls.append(("refused", body["metadata"]["name"]))
            raise Forbidden(403, "Forbidden", "poddisruptionbudgets is forbidden: exceeded quota")
        return await super().create_child(body, owner_uid)

    async def label_pod(self, namespace, name, labels):
        if self.refuse == "label":
            self.calls.append(("refused", name))
            raise Forbidden(403, "Forbidden", "denied by a policy")
        await super().label_pod(namespace, name, labels)


@pytest.mark.parametrize("refuse", ["budget", "label"])
def test_a_toggle_the_api_server_refuses_is_not_retried_at_every_pass_nor_said_to_have_protected(refuse):
    """The young run's protection is refused (a quota on budgets, a policy on labels): a Warning says so, no
    Protected Event claims it, and the passes within `PROTECTION_RETRY` leave it unprotected rather than try
    again; after it, the toggle is tried again."""
    kube, clock = Refusing(refuse), [0.0]
    old, old_job, old_pod = _running_sj("old", NOW - timedelta(minutes=25))
    young, young_job, young_pod = _running_sj("young", NOW - timedelta(minutes=7))
    young, young_pod = replace(young, status={**young.status, "protected": False}), replace(young_pod, protected=False)
    v = view(old, young, jobs={("ns", "old-r1"): old_job, ("ns", "young-r1"): young_job},
             run_pods={("ns", "old-r1"): (old_pod,), ("ns", "young-r1"): (young_pod,)}, active=(old_pod, young_pod))
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: clock[0])  # type: ignore[arg-type]
    tries = []
    for at in (0.0, 1.0, 30.0, PROTECTION_RETRY - 1, PROTECTION_RETRY + 1):
        clock[0] = at
        run(controller, v)
        tries.append(sum(1 for call in kube.calls if call[0] == "refused" and call[1].startswith("young")))
    assert tries == [1, 1, 1, 1, 2], "refused once, then left alone until PROTECTION_RETRY has passed"
    reasons = [(name, reason) for name, reason, _ in kube.messages if name == "young"]
    assert ("young", "Protected") not in reasons and reasons.count(("young", "ProtectionFailed")) == 2


# --- the background lane: steering's writes and Events ------------------------------------------------------

class Gated(FakeKube):
    """`FakeKube` whose calls named in `held` wait until `gate` opens."""

    def __init__(self, *held: str) -> None:
        super().__init__()
        self.held, self.gate = set(held), asyncio.Event()

    async def label_pod(self, namespace, name, labels):
        if "label" in self.held:
            await self.gate.wait()
        await super().label_pod(namespace, name, labels)

    async def event(self, **kw):
        if "event" in self.held:
            await self.gate.wait()
        await super().event(**kw)

    async def create_child(self, body, owner_uid):
        if "job" in self.held and body["kind"] == "Job":
            await self.gate.wait()
        return await super().create_child(body, owner_uid)


def test_a_pass_does_not_wait_for_its_launches_and_the_next_one_leaves_them_and_their_room_alone():
    """"big" (2 of the node's 8 CPU, 5.6 usable) is admitted and its Job is slow to make: the pass returns
    meanwhile. The next pass, which sees no Job yet, neither launches "big" again (there would be room for
    it twice), nor writes it as queued, nor gives its room to "later" (4 more CPU would pass the threshold).
    Once made, the loop is woken."""
    kube, woken = Gated("job"), []
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, wake=lambda: woken.append(1))  # type: ignore[arg-type]
    v = view(sj(name="big", cpu="2", created=NOW - timedelta(minutes=1)), sj(name="later", cpu="4"))

    async def passes() -> tuple[set[str], list[str]]:
        await controller.reconcile(v)
        under_way = {entry.key for entry in controller.launching.values()}
        await controller.reconcile(v)
        during = launched(kube)
        kube.gate.set()
        await controller.launches_done()
        return under_way, during

    under_way, during = asyncio.run(passes())
    assert under_way == {"ns/big"} and during == []
    assert launched(kube) == ["big-r1"] and not controller.launching and woken
    assert [name for kind, name in kube.calls if kind == "event"] == ["Queued"] and ("later", "Queued") in kube.events
    assert controller.metrics.launched._value.get() == 1


def _made_elsewhere(name: str, created: datetime) -> JobView:
    """The run of SJ ``name`` as another replica made it (this process has no record of launching it), taken up by
    the Job controller as it was made."""
    return job_view({"metadata": {"namespace": "ns", "name": f"{name}-r1", "uid": f"j-{name}",
                                  "labels": {"scavenger.dev/job-name": name},
                                  "ownerReferences": owned_by(name),
                                  "creationTimestamp": created.isoformat()},
                     "status": {"startTime": created.isoformat()}})


def _records(kube: FakeKube, job_name: str) -> list[str]:
    return [status["phase"] for kind, status in kube.calls if kind == "status" and status.get("jobName") == job_name]


def test_a_new_runs_record_waits_while_runs_are_launched_holding_its_room_and_goes_once_they_pause():
    """"a"'s run (4 of the node's 5.6 usable CPU) was made 15 s ago and its pod has not started: it is due to be
    recorded as Starting. While "b"'s launch is under way the record waits, a pass is asked for in
    EVENT_QUIET, and "a" keeps its room ("c", 4 CPU, is not admitted). Once launches have paused it is
    written."""
    kube, timers = Gated("job"), []
    t = [100.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: t[0],  # type: ignore[arg-type]
                            call_later=lambda delay, fn: timers.append((delay, fn)) or asyncio.get_running_loop()
                            .call_later(3600, fn))
    a = sj(name="a", cpu="4", created=NOW - timedelta(minutes=2),
           status={"phase": "Pending", "attempt": 0})
    jobs = {("ns", "a-r1"): _made_elsewhere("a", NOW - timedelta(seconds=15))}
    b = sj(name="b", created=NOW - timedelta(minutes=1))

    async def passes() -> list[str]:
        await controller.reconcile(view(b))
        await controller.reconcile(view(a, b, sj(name="c", cpu="4"), jobs=jobs))
        during = _records(kube, "a-r1")
        kube.gate.set()
        await controller.launches_done()
        t[0] += EVENT_QUIET
        await controller.reconcile(view(a, b, sj(name="c", cpu="4"), jobs=jobs))
        await controller.settle()
        return during

    during = asyncio.run(passes())
    assert during == [] and [delay for delay, _ in timers] == [EVENT_QUIET]
    assert _records(kube, "a-r1") == ["Starting"]
    assert launched(kube) == ["b-r1"]


def test_a_new_runs_record_waits_for_launches_at_most_event_deferral_after_its_job_was_made():
    kube = Gated("job")
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: 100.0)  # type: ignore[arg-type]
    a = sj(name="a", created=NOW - timedelta(minutes=2), status={"phase": "Pending", "attempt": 0})
    b = sj(name="b", created=NOW - timedelta(minutes=1))
    made = NOW - timedelta(seconds=EVENT_DEFERRAL + 1)

    async def passes() -> list[str]:
        await controller.reconcile(view(b))
        await controller.reconcile(view(a, b, jobs={("ns", "a-r1"): _made_elsewhere("a", made)}))
        during = _records(kube, "a-r1")
        kube.gate.set()
        await controller.settle()
        return during

    assert asyncio.run(passes()) == ["Starting"]


def test_launches_not_begun_are_dropped_when_another_replica_leads(monkeypatch):
    """One launch worker: "a" is being made when leadership is lost; "b", still queued, is forgotten (the
    leader decides it), "a" is finished."""
    monkeypatch.setattr("sj_operator.write.launcher.LAUNCH_WORKERS", 1)
    kube = Gated("job")
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]

    async def passes() -> set[str]:
        await controller.reconcile(view(sj(name="a", created=NOW - timedelta(minutes=1)), sj(name="b")))
        await asyncio.sleep(0)
        controller.drop_launches()
        left = {entry.key for entry in controller.launching.values()}
        kube.gate.set()
        await controller.launches_done()
        return left

    assert asyncio.run(passes()) == {"ns/a"}
    assert launched(kube) == ["a-r1"] and not controller.launching


def test_a_pass_leaves_the_sjs_whose_launch_is_queued_alone_and_looks_at_each_once_its_launch_is_done(monkeypatch):
    """One launch worker, "a"'s Job slow to make and "b" queued behind it: the next pass neither observes nor
    decides them (a paced burst keeps thousands queued for minutes, and each pass would decide them all again);
    once their launches are done, the pass after looks at both."""
    monkeypatch.setattr("sj_operator.write.launcher.LAUNCH_WORKERS", 1)
    kube = Gated("job")
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    v = view(sj(name="a", created=NOW - timedelta(minutes=1)), sj(name="b"))
    observe, seen = controller.memo.observe, []

    def observing(*args: Any, **kwargs: Any) -> Any:
        seen.extend(s.name for s in kwargs.get("sjs") or ())
        return observe(*args, **kwargs)

    monkeypatch.setattr(controller.memo, "observe", observing)

    async def passes() -> tuple[list[str], list[str]]:
        await controller.reconcile(v)
        seen.clear()
        await controller.reconcile(v)
        queued = list(seen)
        kube.gate.set()
        await asyncio.wait_for(controller.launches_done(), 5)
        seen.clear()
        await controller.reconcile(v)
        return queued, sorted(seen)

    queued, done = asyncio.run(passes())
    assert queued == [] and done == ["a", "b"]
    assert launched(kube) == ["a-r1", "b-r1"]


def test_launches_queued_are_taken_in_turn_by_namespace(monkeypatch):
    """One launch worker, three SJs of one namespace admitted before another namespace's one: that one is launched
    second, not behind the whole burst (paced launches of a burst may take minutes)."""
    monkeypatch.setattr("sj_operator.write.launcher.LAUNCH_WORKERS", 1)
    kube = FakeKube()
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    burst = [sj(name=f"a{i}", created=NOW - timedelta(minutes=2)) for i in range(3)]
    other = replace(sj(name="b", created=NOW - timedelta(minutes=1)), namespace="other", uid="u-other-b")
    run(controller, view(*burst, other))
    assert launched(kube) == ["a0-r1", "b-r1", "a1-r1", "a2-r1"]


def _paced_controller(monkeypatch, t: list[float]) -> tuple[FakeKube, Controller]:
    """One launch worker that waits from two runs behind, looking again at every turn of the loop."""
    monkeypatch.setattr("sj_operator.write.launcher.LAUNCH_WORKERS", 1)
    kube = FakeKube()
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: t[0])  # type: ignore[arg-type]
    controller.launcher.backlog_at, controller.launcher.recheck = 2, 0.0
    return kube, controller


async def _turns(n: int = 50) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def _taken_up(kube: FakeKube, *names: str) -> ClusterView:
    """The SJs ``names`` (one CPU each), the runs made of them taken up by the Job controller and their pods bound."""
    jobs, pods = {}, {}
    for name in names:
        if f"{name}-r1" in kube.made:
            jobs[("ns", f"{name}-r1")] = kube.job(f"{name}-r1", created=NOW)
            pods[("ns", f"{name}-r1")] = (PodView(namespace="ns", name=f"{name}-r1-0", uid=f"p-{name}", sj=name,
                                                  run=f"{name}-r1", node="n1", phase="Pending", deleting=False,
                                                  requests={"cpu": 1000}, placed=NOW),)
    return view(*(sj(name=name, created=NOW - timedelta(minutes=1)) for name in names), jobs=jobs, run_pods=pods)


def test_launches_wait_while_the_control_plane_has_not_taken_up_the_runs_made_and_go_on_once_it_has(monkeypatch):
    """Four SJs admitted at once, launches waiting from two runs behind: two are made, and the other two wait
    (however long the loop turns) until a pass finds those two taken up (their Jobs synced, their pods bound)."""
    t = [100.0]
    kube, controller = _paced_controller(monkeypatch, t)

    async def passes() -> tuple[list[str], int, list[str]]:
        await controller.reconcile(_taken_up(kube, "a", "b", "c", "d"))
        await _turns()
        made, backlog = launched(kube), controller.ledger.backlog()
        await controller.reconcile(_taken_up(kube, "a", "b", "c", "d"))
        await asyncio.wait_for(controller.launches_done(), 5)
        return made, backlog, launched(kube)

    during, backlog, after = asyncio.run(passes())
    assert (during, backlog) == (["a-r1", "b-r1"], 2)
    assert after == ["a-r1", "b-r1", "c-r1", "d-r1"]
    assert controller.metrics.launch_paced._value.get() == 0, "the clock did not move while they waited"


def test_the_loop_may_wait_long_only_while_the_control_plane_is_behind_and_no_steering_write_is_under_way(
        monkeypatch):
    """`Controller.unhurried`: the ledger behind (20 launches queued, none taken yet) and the steering lane idle; a
    steering write under way (a drain's unprotections are handed to the lane by passes) or nothing behind: not."""
    monkeypatch.setattr("sj_operator.write.launcher.LAUNCH_WORKERS", 1)
    t = [100.0]
    kube, controller = _paced_controller(monkeypatch, t)
    assert not controller.unhurried
    names = [f"s{i}" for i in range(20)]

    async def passes() -> tuple[bool, bool]:
        await controller.reconcile(replace(_taken_up(kube, *names), nodes=tuple(node(f"n{i}") for i in range(6))))
        behind = controller.unhurried
        d = next(iter(controller._kept.decided.values()))
        controller.steering_lane.under_way[d.observed.sj.uid] = d
        steering = controller.unhurried
        controller.steering_lane.under_way.clear()
        controller.drop_launches()
        await asyncio.wait_for(controller.launches_done(), 5)
        return behind, steering

    assert asyncio.run(passes()) == (True, False)


@pytest.mark.parametrize(("change", "made"), [
    ("none", ["a-r1", "b-r1", "c-r1", "d-r1"]),
    ("deleted", ["a-r1", "b-r1", "d-r1"]),      # gone from the cache
    ("deleting", ["a-r1", "b-r1", "d-r1"]),     # its deletionTimestamp set
    ("edited", ["a-r1", "b-r1", "d-r1"]),       # its spec edited: a new generation (suspended, resized)
    ("recreated", ["a-r1", "b-r1", "d-r1"]),    # deleted and made again under its name: another uid
    ("relabelled", ["a-r1", "b-r1", "c-r1", "d-r1"]),  # metadata or status only: the same generation
])
def test_a_queued_launch_whose_sj_changed_since_its_admission_is_dropped_and_decided_again(monkeypatch, change,
                                                                                           made):
    """Four SJs admitted at once, launches waiting from two runs behind; meanwhile ``c`` changes in the watch cache.
    When the control plane has taken up the first two, ``c``'s launch is dropped unless only its metadata changed,
    counted, and ``c`` is among the SJs the next pass looks at again."""
    t = [100.0]
    kube, controller = _paced_controller(monkeypatch, t)
    cache = {(s.namespace, s.name): s for s in _taken_up(kube, "a", "b", "c", "d").sjs}
    controller.current_sj = lambda namespace, name: cache.get((namespace, name))
    c = cache[("ns", "c")]
    changed = {"none": c, "deleted": None, "deleting": replace(c, deleting=True),
               "edited": replace(c, generation=2, spec={**c.spec, "suspend": True}),
               "recreated": replace(c, uid="u-c2"), "relabelled": replace(c, resource_version="99")}[change]

    async def passes() -> tuple[list[str], set[str]]:
        await controller.reconcile(_taken_up(kube, "a", "b", "c", "d"))
        await _turns()
        if changed is None:
            del cache[("ns", "c")]
        else:
            cache[("ns", "c")] = changed
        await controller.reconcile(_taken_up(kube, "a", "b", "c", "d"))
        await asyncio.wait_for(controller.launches_done(), 5)
        return launched(kube), controller.ledger.take_ended()

    after, ended = asyncio.run(passes())
    assert after == made
    assert controller.metrics.launches_dropped._value.get() == (4 - len(made))
    assert "u-c" in ended, "the SJ is looked at again by the next pass"


@pytest.mark.parametrize("change", ["deleted", "edited", "relabelled"])
def test_a_pass_that_sees_a_queued_launchs_sj_changed_drops_it_at_once_and_frees_its_room(monkeypatch, change):
    """Launches waiting from two runs behind, none taken up: a pass whose view shows ``c`` deleted or its spec
    edited drops ``c``'s queued launch then (not minutes later, when a worker would take it), so the room it held
    is free and ``c`` is decided again; a change of its metadata alone keeps it queued."""
    t = [100.0]
    kube, controller = _paced_controller(monkeypatch, t)
    first = _taken_up(kube, "a", "b", "c", "d")
    cache = {(s.namespace, s.name): s for s in first.sjs}
    controller.current_sj = lambda namespace, name: cache.get((namespace, name))

    async def passes() -> tuple[set[str], list[str]]:
        await controller.reconcile(first)
        await _turns()
        c = cache[("ns", "c")]
        if change == "deleted":
            del cache[("ns", "c")]
        else:
            cache[("ns", "c")] = (replace(c, generation=2, spec={**c.spec, "suspend": True}) if change == "edited"
                                  else replace(c, resource_version="99"))
        await controller.reconcile(replace(first, sjs=tuple(cache.values())))
        queued = set(controller.ledger.launching)
        controller.drop_launches()
        await asyncio.wait_for(controller.launches_done(), 5)
        return queued, launched(kube)

    queued, made = asyncio.run(passes())
    assert made == ["a-r1", "b-r1"]
    kept = change == "relabelled"
    assert ("u-c" in queued) is kept and "u-d" in queued
    assert controller.metrics.launches_dropped._value.get() == (0 if kept else 1)


@pytest.mark.parametrize(("launch_backlog", "made"), [
    (0, ["a-r1", "b-r1", "c-r1", "d-r1"]),   # launches never wait
    (2, ["a-r1", "b-r1"]),                   # from two runs behind
    (5, ["a-r1", "b-r1", "c-r1", "d-r1"]),
])
def test_the_launch_backlog_setting_is_the_one_launches_wait_from(monkeypatch, launch_backlog, made):
    """``--launch-backlog``, as configured: four SJs admitted at once, and no pass finding their runs taken up."""
    monkeypatch.setattr("sj_operator.write.launcher.LAUNCH_WORKERS", 1)
    kube = FakeKube()
    controller = Controller(kube, OperatorConfig(launch_backlog=launch_backlog), clock=lambda: NOW,  # type: ignore[arg-type]
                            monotonic=lambda: 100.0)
    controller.launcher.recheck = 0.0

    async def passes() -> list[str]:
        await controller.reconcile(_taken_up(kube, "a", "b", "c", "d"))
        await _turns()
        done = launched(kube)
        controller.drop_launches()
        await asyncio.wait_for(controller.launches_done(), 5)
        return done

    assert asyncio.run(passes()) == made


def test_a_launch_waits_for_the_control_plane_at_most_launch_wait_most(monkeypatch):
    """Runs that stay behind (a scheduler that is down) slow launches down, never stop them: a launch waits
    ``wait_most`` seconds at most, and the time is counted."""
    t = [100.0]
    kube, controller = _paced_controller(monkeypatch, t)
    controller.launcher.wait_most = 60.0

    async def passes() -> tuple[list[str], list[str], list[str]]:
        await controller.reconcile(_taken_up(kube, "a", "b", "c"))
        await _turns()
        waiting = launched(kube)
        t[0] += 59.0
        await _turns()
        still = launched(kube)
        t[0] += 1.0
        await asyncio.wait_for(controller.launches_done(), 5)
        return waiting, still, launched(kube)

    waiting, still, after = asyncio.run(passes())
    assert waiting == still == ["a-r1", "b-r1"]
    assert after == ["a-r1", "b-r1", "c-r1"]
    assert controller.metrics.launch_paced._value.get() == 60.0


@pytest.mark.parametrize(("behind", "made_before_view", "made_after_view", "backlog"), [
    (0, 0, 0, 0),
    (3, 0, 0, 3),     # runs the last pass found behind
    (0, 2, 0, 2),     # runs made before the view of the pass under way: counted until its `in_flight`
    (0, 0, 2, 2),     # ... and after it
    (3, 2, 1, 6),
])
def test_the_backlog_counts_the_runs_found_behind_and_those_made_since_the_view(controller, behind,
                                                                                 made_before_view, made_after_view,
                                                                                 backlog):
    """`Ledger.backlog`, which launches wait on: the runs the last pass found behind, and those made since the
    view of the pass that found them, until a pass that holds them has looked at them."""
    from sj_operator.policy.snapshot import InFlightRun

    ledger, runs = controller.ledger, iter(range(100))

    def make() -> None:
        i = next(runs)
        ledger.made(("ns", f"m{i}-r1"), InFlightRun(key=f"ns/m{i}", pods=1, request={}), JobView(
            namespace="ns", name=f"m{i}-r1", uid=f"j{i}", sj=f"m{i}", deleting=False, complete=False, failed=False))

    in_flight_now(ledger, [_gang_decided(controller, "uu-", name=f"w{i}") for i in range(behind)],
                  lambda s, exc: None)
    for _ in range(made_before_view):
        make()
    ledger.with_launched(view())
    for _ in range(made_after_view):
        make()
    assert ledger.backlog() == backlog
    in_flight_now(ledger, [], lambda s, exc: None)
    assert ledger.backlog() == made_after_view, "a full pass: none behind, and the runs made before its view looked at"
    make()
    ledger.not_leading()
    assert ledger.backlog() == 0, "another replica leads: nothing this one made or found is waited for"


def _steering_view(*ago_minutes: tuple[str, int]) -> ClusterView:
    runs = [_running_sj(name, NOW - timedelta(minutes=ago)) for name, ago in ago_minutes]
    return view(*(s for s, _, _ in runs), jobs={("ns", j.name): j for _, j, _ in runs},
                run_pods={("ns", j.name): (p,) for _, j, p in runs}, active=tuple(p for _, _, p in runs))


def test_a_pass_does_not_wait_for_steerings_writes_and_leaves_the_sj_alone_until_they_are_done():
    """"fresh" is at level 0 of its period but its pod still carries protection: its pod label, then its Event
    (which says what the pod now carries), go out in the background, with no status write. The pass returns while
    the label waits; the next pass writes nothing for it again. Once the label is written, a pass that still sees
    the old label (the watch lags) takes it from the ledger: it writes the level, not the label again."""
    kube, woken = Gated("label"), []
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, wake=lambda: woken.append(1))  # type: ignore[arg-type]
    v = _steering_view(("fresh", 1))

    async def passes() -> None:
        await controller.reconcile(v)
        for _ in range(100):  # the batch runs while the loop is free; the label waits at the gate
            await asyncio.sleep(0)
        assert set(controller.steering) == {"u-fresh"} and not woken
        await controller.reconcile(v)
        assert kube.kinds() == []
        kube.gate.set()
        await controller.settle()
        assert kube.kinds() == ["label", "event"]
        assert not controller.steering and woken == [1]
        await controller.reconcile(v)
        await controller.settle()

    asyncio.run(passes())
    assert kube.kinds() == ["label", "event", "status"] and kube.events == [("fresh", "Unprotected")]
    written = kube.calls[-1][1]
    assert (written["runningPriority"], written["protected"]) == (0, False)


class Stored(FakeKube):
    """`FakeKube` that keeps each SJ's status as stored (the patches merged into ``stored``, which a test fills
    first) and answers with it."""

    def __init__(self) -> None:
        super().__init__()
        self.stored: dict[str, dict[str, Any]] = {}

    async def patch_sj_status(self, namespace, name, status, resource_version):
        answer = await super().patch_sj_status(namespace, name, status, resource_version)
        merged = {k: v for k, v in {**self.stored.get(name, {}), **status}.items() if v is not None}
        self.stored[name] = merged
        return {**answer, "status": merged}

    def shown(self, v: ClusterView) -> ClusterView:
        """``v`` with its SJs as stored."""
        return replace(v, sjs=tuple(replace(one, status=self.stored[one.name], resource_version=str(self.rv))
                                    for one in v.sjs))


def test_steering_takes_protection_toggles_first_and_level_writes_with_the_room_left(monkeypatch):
    """With room for one toggle at a time: "fresh" and "fresh2" (protection to drop) are toggled one per pass;
    "young" (level 1 to 2, still protected: a level write, which may wait) goes only once no toggle is left out.
    The watch never shows the labels here: the ledger does."""
    monkeypatch.setattr("sj_operator.write.steering.STEERING_IN_FLIGHT", 1)
    kube = Stored()
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    v = _steering_view(("young", 7), ("fresh", 1), ("fresh2", 2))
    kube.stored = {one.name: dict(one.status) for one in v.sjs}

    async def passes() -> list[list[tuple[str, Any]]]:
        batches = []
        for _ in range(4):
            await controller.reconcile(kube.shown(v))
            await controller.settle()
            batches.append(sorted((kind, body["runningPriority"] if kind == "status" else body[0])
                                  for kind, body in kube.calls if kind != "event"))
            kube.calls.clear()
        return batches

    first, second, third, fourth = asyncio.run(passes())
    assert first == [("label", "fresh-r1-0")]
    assert second == [("label", "fresh2-r1-0"), ("status", 0), ("status", 2)]  # fresh's level, young's
    assert third == [("status", 0)]  # fresh2's level
    assert fourth == []
    assert {name: (st["runningPriority"], st["protected"]) for name, st in kube.stored.items()} == {
        "young": (2, True), "fresh": (0, False), "fresh2": (0, False)}


def _lateness(controller: Controller, toggle: str) -> tuple[float | None, float | None]:
    """The count and sum of ``scavenger_protection_toggle_lateness_seconds`` for ``toggle``."""
    get = controller.metrics.registry.get_sample_value
    return (get("scavenger_protection_toggle_lateness_seconds_count", {"toggle": toggle}),
            get("scavenger_protection_toggle_lateness_seconds_sum", {"toggle": toggle}))


def test_a_label_write_that_failed_is_tried_again_by_the_next_pass_and_one_written_is_not():
    """"fresh" (1 minute into its period, its pod still labelled protected) is toggled; the label write fails, so
    the next pass finds the pod still protected and toggles it again. Once written, a pass whose view still shows
    the old label (the watch lags) writes the level instead. The toggle was due when the period began: it is
    measured a minute late, once, when its label was written."""
    kube = Stored()
    kube.fail["label_pod"] = [KubeError(500, "InternalError", "etcd is slow")]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    v = _steering_view(("fresh", 1))
    kube.stored = {one.name: dict(one.status) for one in v.sjs}
    for _ in range(4):
        run(controller, kube.shown(v))
    assert [kind for kind, _ in kube.calls if not kind.startswith("event")] == ["label", "status"]
    assert kube.stored["fresh"]["runningPriority"] == 0 and kube.stored["fresh"]["protected"] is False
    assert kube.events == [("fresh", "Unprotected")]  # the toggle decided again is counted into its Event
    assert _lateness(controller, "unprotect") == (1.0, 60.0) and _lateness(controller, "protect") == (None, None)


def test_a_run_whose_budget_name_is_taken_is_left_unprotected_and_tried_again_after_the_budget_refresh(kube):
    """"young" asks for protection, but a budget of its budget's name is someone else's: one Warning, and until
    `BUDGET_REFRESH` has passed it is left unprotected (its level is written meanwhile) rather than toggled at
    every pass; then it is tried again."""
    clock = [0.0]
    kube = Stored()
    kube.objects[("PodDisruptionBudget", "young-protect")] = _foreign("PodDisruptionBudget", "young-protect")
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: clock[0])  # type: ignore[arg-type]
    v = _steering_view(("young", 7), ("fresh", 1))
    v = replace(v, run_pods={key: tuple(replace(p, protected=False) for p in pods) for key, pods in v.run_pods.items()})
    kube.stored = {one.name: dict(one.status) for one in v.sjs}
    warned = []
    for at in (0.0, 1.0, 2.0, BUDGET_REFRESH + 1):
        clock[0] = at
        run(controller, kube.shown(v))
        warned.append(sum(1 for name, reason, _ in kube.messages if (name, reason) == ("young", "NameTaken")))
    assert warned == [1, 1, 1, 2]
    assert not [c for c in kube.calls if c[0] == "label"]
    assert (kube.stored["young"]["runningPriority"], kube.stored["young"]["protected"]) == (2, False)


def test_a_pass_writes_the_aggregated_events_counts_that_are_due_and_asks_for_a_pass_when_they_are():
    """"fresh"'s pod is labelled protected again by someone (past the ledger's time for its own label): the toggle
    is counted into its Event, whose count is written `EVENT_SERIES_INTERVAL` after it was made, by the pass
    asked for then."""
    from sj_operator.write.events import EVENT_SERIES_INTERVAL
    from sj_operator.write.ledger import WRITTEN_TTL
    kube, timers, t = Stored(), [], [100.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: t[0],  # type: ignore[arg-type]
                            call_later=lambda delay, fn: timers.append(delay) or asyncio.get_running_loop()
                            .call_later(3600, fn))
    v = _steering_view(("fresh", 1))
    kube.stored = {one.name: dict(one.status) for one in v.sjs}
    run(controller, kube.shown(v))
    t[0] += WRITTEN_TTL + 1
    run(controller, kube.shown(v))
    run(controller, kube.shown(v))  # the pass the steering lane wakes the loop for once its writes are done
    assert kube.events == [("fresh", "Unprotected")] and timers[-1] == EVENT_SERIES_INTERVAL - WRITTEN_TTL - 1
    t[0] = 100.0 + EVENT_SERIES_INTERVAL
    run(controller, kube.shown(replace(v, run_pods={key: tuple(replace(p, protected=False) for p in pods)
                                                    for key, pods in v.run_pods.items()})))
    assert ("event-update", ("fresh.1", 2)) in kube.calls


def test_events_past_the_backlog_are_dropped_and_counted(monkeypatch):
    """Two SJs launched while the API server is slow to record Events, with room for one SJ's Events."""
    monkeypatch.setattr("sj_operator.write.events.EVENT_BACKLOG", 1)
    kube = Gated("event")
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]

    async def passes() -> None:
        await controller.reconcile(view(sj(name="a"), sj(name="b")))
        kube.gate.set()
        await controller.settle()

    asyncio.run(passes())
    assert launched(kube) == ["a-r1", "b-r1"] and kube.events == [("a", "Launched")]
    assert controller.metrics.events_dropped._value.get() == 1


def test_events_wait_while_runs_are_launched_and_go_once_launches_pause():
    """The launch's Event waits (the API server's room goes to the runs); a second after the last launch, the
    next Event recorded takes the waiting one with it, in order."""
    kube = FakeKube()
    t = [100.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW,  # type: ignore[arg-type]
                            monotonic=lambda: t[0])

    async def passes() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        await controller.reconcile(view(sj(name="a")))
        for _ in range(5):
            await asyncio.sleep(0)
        during = list(kube.events)
        t[0] += 1.5
        controller.recorder.record(sj(name="b"), [Event("Normal", "Note", "after the launches")])
        for _ in range(5):
            await asyncio.sleep(0)
        return during, list(kube.events)

    during, after = asyncio.run(passes())
    assert launched(kube) == ["a-r1"] and during == []
    assert after == [("a", "Launched"), ("b", "Note")]


def test_settle_records_the_events_waiting_for_launches_at_once():
    """At shutdown nothing is launched any more: the waiting Events go without their wait."""
    kube = FakeKube()
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW,  # type: ignore[arg-type]
                            monotonic=lambda: 100.0)

    async def passes() -> None:
        await controller.reconcile(view(sj(name="a"), sj(name="b")))
        await asyncio.wait_for(controller.settle(), timeout=0.5)

    asyncio.run(passes())
    assert launched(kube) == ["a-r1", "b-r1"] and kube.events == [("a", "Launched"), ("b", "Launched")]


def test_a_waiting_steering_event_is_replaced_by_the_sjs_next_toggle():
    """While the recorder is behind, an SJ's protection toggles replace each other in the backlog (the message
    says how many); any other Event of the SJ stays in its place, and a toggle after it comes after it."""
    from sj_operator.write.events import EVENT_WORKERS
    kube = Gated("event")
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    a = sj(name="a")

    def ev(reason: str, message: str) -> list[Event]:
        return [Event("Normal", reason, message)]

    async def record() -> None:
        for i in range(EVENT_WORKERS):  # the workers each take one and wait on the API server
            controller.recorder.record(sj(name=f"busy{i}"), ev("Launched", "run launched"))
        for _ in range(3):
            await asyncio.sleep(0)
        controller.recorder.record(a, ev("Protected", "level 1"))
        controller.recorder.record(a, ev("Unprotected", "period ended"))
        controller.recorder.record(a, ev("Protected", "level 2"))
        controller.recorder.record(a, ev("Interrupted", "preempted"))
        controller.recorder.record(a, ev("Unprotected", "least unsaved work"))
        kube.gate.set()
        await controller.settle()

    asyncio.run(record())
    assert [(r, m) for name, r, m in kube.messages if name == "a"] == [
        ("Protected", "level 2 (2 earlier protection change(s) not recorded)"),
        ("Interrupted", "preempted"),
        ("Unprotected", "least unsaved work"),
    ]
    assert controller.metrics.events_replaced._value.get() == 2 and controller.recorder.steering_unrecorded == {}


def test_an_sjs_events_are_stamped_when_they_happened_not_when_they_are_recorded():
    """The launch's Event is still waiting when the next pass sees the run's pod running: whichever is
    recorded first, each carries the time of the pass it happened in (the injected clock), not the time it
    was recorded at (an hour later here)."""
    kube = Gated("event")
    t = [100.0]
    wall = [NOW]
    controller = Controller(kube, OperatorConfig(), clock=lambda: wall[0], monotonic=lambda: t[0])  # type: ignore[arg-type]
    pod = PodView(namespace="ns", name="work-r1-0", uid="p", sj="work", run="work-r1", node="n1", phase="Running",
                  deleting=False, requests={"cpu": 1000}, all_running=True, index=0, protected=False)

    async def passes() -> None:
        await controller.reconcile(view(sj()))
        await controller.launches_done()
        t[0] += EVENT_QUIET  # launches have paused: the run is recorded (its Events still wait at the gate)
        wall[0] = NOW + timedelta(seconds=EVENT_QUIET)
        job = job_view({"metadata": {"namespace": "ns", "name": "work-r1", "uid": "j",
                                     "labels": {"scavenger.dev/job-name": "work"},
                                     "ownerReferences": owned_by("work")}})
        await controller.reconcile(view(sj(stored_status(kube), rv=str(kube.rv)), jobs={("ns", "work-r1"): job},
                                        run_pods={("ns", "work-r1"): (pod,)}, active=(pod,)))
        wall[0] = NOW + timedelta(hours=1)
        kube.gate.set()
        await controller.settle()

    asyncio.run(passes())
    stamps = {reason: at for _, reason, at in kube.stamped}
    assert (stamps["Launched"], stamps["Running"]) == (NOW, NOW + timedelta(seconds=EVENT_QUIET))


def test_events_waiting_to_be_recorded_do_not_keep_old_versions_of_the_sj_alive():
    """At scale thousands of Events may wait; each names its SJ, and must not hold the object it was made
    from (its whole spec and status) once the watch has shown a newer version. Nor may the admission
    queue's cache hold the version an SJ last waited in once it has launched."""
    import gc
    import weakref

    kube = Gated("event")
    t = [100.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: t[0])  # type: ignore[arg-type]
    pod = PodView(namespace="ns", name="work-r1-0", uid="p", sj="work", run="work-r1", node="n1", phase="Running",
                  deleting=False, requests={"cpu": 1000}, all_running=True, index=0, protected=False)
    first = [sj()]
    old = weakref.ref(first[0])

    async def passes() -> None:
        await controller.reconcile(view(first.pop()))
        await controller.launches_done()
        t[0] += EVENT_QUIET  # launches have paused: the run is recorded (its Events still wait at the gate)
        job = job_view({"metadata": {"namespace": "ns", "name": "work-r1", "uid": "j",
                                     "labels": {"scavenger.dev/job-name": "work"},
                                     "ownerReferences": owned_by("work")}})
        await controller.reconcile(view(sj(stored_status(kube), rv=str(kube.rv)), jobs={("ns", "work-r1"): job},
                                        run_pods={("ns", "work-r1"): (pod,)}, active=(pod,)))
        gc.collect()
        assert old() is None
        kube.gate.set()
        await controller.settle()

    asyncio.run(passes())
    assert sorted(reason for _, reason, _ in kube.stamped) == ["Launched", "Running"]


# --- sharing the event loop ---------------------------------------------------------------------

def test_a_pass_over_many_sjs_gives_the_loops_other_tasks_turns_before_its_first_write():
    """The watches, probes and webhook share the loop with the pass: with a budget of 0 the pass gives them
    a turn between each two slices of its work (observing, deciding, keeping, the runs in flight, explaining,
    the faults recovered, picking the writes), not only once it waits for the API."""
    turns: list[int] = []

    class Counting(FakeKube):
        async def patch_sj_status(self, namespace, name, status, resource_version):
            turns.append(len(ticks))
            return await super().patch_sj_status(namespace, name, status, resource_version)

    ticks: list[None] = []
    kube = Counting()
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, hold_budget=0.0)  # type: ignore[arg-type]
    many = view(*(sj(name=f"w{i}", cpu="4") for i in range(600)))

    async def both() -> None:
        async def other() -> None:
            while True:
                ticks.append(None)
                await asyncio.sleep(0)

        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        ticks.clear()
        await controller.reconcile(many)
        task.cancel()
        await controller.settle()

    asyncio.run(both())
    assert len(turns) == 599  # each queued with why it waits (one CPU node: room for one, launched unwritten)
    # 600 SJs are five slices in each of seven steps (observing, deciding, keeping the decisions, the runs in
    # flight, explaining, the faults recovered, picking the writes): at least a turn between each two slices of
    # each. The steps over every SJ in a full pass held the loop 1.5 s at 10,000 SJs when three were not sliced.
    assert turns[0] >= 7 * 4


def test_the_writes_of_a_pass_go_out_at_most_api_concurrency_at_once_with_their_results_in_order():
    from sj_operator.controller import API_CONCURRENCY
    from sj_operator.write.pool import concurrently

    controller = Controller(FakeKube(), OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    in_flight, most = [0], [0]

    async def step(i: int) -> int:
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        await asyncio.sleep(0.001 * (i % 3))  # they finish out of order
        in_flight[0] -= 1
        return i

    results = asyncio.run(concurrently((step(i) for i in range(100)), API_CONCURRENCY, controller.hold_budget))
    assert results == list(range(100))
    assert most[0] == API_CONCURRENCY
    assert asyncio.run(concurrently((), API_CONCURRENCY, controller.hold_budget)) == []


def test_a_dry_run_accepted_stands_for_runs_of_the_same_shape_for_a_while_and_a_refusal_never_does(kube):
    """In a burst, one dry run per pod shape and namespace, not one per SJ."""
    from sj_operator.kube import Forbidden
    from sj_operator.write.gate import DRY_RUN_TTL

    clock = [0.0]
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW, monotonic=lambda: clock[0])  # type: ignore[arg-type]
    run(controller, view(sj(name="a"), sj(name="b"), sj(name="big", cpu="2"), nodes=(node(), node("n2"))))
    assert [p["metadata"]["generateName"] for p in kube.dry_runs] == ["a-r1-", "big-r1-"], "b is a's shape"
    assert {"a-r1", "b-r1", "big-r1"} <= {name for kind, name in kube.calls if kind == "job"}

    clock[0] = DRY_RUN_TTL  # the verdict has expired: c is tried again, and refused
    kube.fail["dry_run_pod"] = [Forbidden(403, "Forbidden", FORBIDDEN_PSS)]
    run(controller, view(sj(name="c"), nodes=(node(), node("n2"))))
    run(controller, view(sj(name="d"), nodes=(node(), node("n2"))))  # the refusal is not reused
    assert [p["metadata"]["generateName"] for p in kube.dry_runs][2:] == ["c-r1-", "d-r1-"]
    assert ("job", "d-r1") in kube.calls and ("job", "c-r1") not in kube.calls


def test_in_a_namespace_with_a_resource_quota_every_run_is_tried_as_a_dry_run(controller, kube):
    """A ResourceQuota's room changes with every pod: an acceptance there says nothing about the next run."""
    kube.quotas = [{"metadata": {"name": "team"}, "status": {"hard": {"requests.cpu": "40"},
                                                              "used": {"requests.cpu": "1"}}}]
    run(controller, view(sj(name="a"), sj(name="b")))
    assert [p["metadata"]["generateName"] for p in kube.dry_runs] == ["a-r1-", "b-r1-"]


def in_flight_now(ledger: Any, *args: Any, **kwargs: Any) -> Any:
    """``Ledger.in_flight`` (a coroutine: it gives the loop turns in a long pass) run to its end."""
    return asyncio.run(ledger.in_flight(*args, **kwargs))


def test_a_starting_runs_room_in_flight_follows_its_scheduled_pods_and_is_the_same_entry_while_they_do(controller):
    """A Starting gang of three whose pods are scheduled one by one: each pass counts the pods not scheduled
    yet as in flight; a pass that sees the same pods and spec keeps the last pass's entry."""
    status = {"phase": "Starting", "attempt": 1, "jobName": "work-r1", "launchedTimestamp": NOW.isoformat()}
    gang = sj(status, parallelism=3)
    job = job_view({"metadata": {"namespace": "ns", "name": "work-r1", "uid": "j-work",
                                 "creationTimestamp": NOW.isoformat(), "labels": {"scavenger.dev/job-name": "work"},
                                 "ownerReferences": owned_by("work")}})

    def member(i: int, node: str | None) -> PodView:
        return PodView(namespace="ns", name=f"work-r1-{i}", uid=f"p{i}", sj="work", run="work-r1", node=node,
                       phase="Pending", deleting=False, requests={"cpu": 1000}, all_running=False, index=i)

    def in_flight(scheduled: int) -> Any:
        pods = tuple(member(i, "n1" if i < scheduled else None) for i in range(3))
        v = view(gang, jobs={("ns", "work-r1"): job}, run_pods={("ns", "work-r1"): pods})
        observation = controller.memo.observe(v, handles=None, fresh=lambda s: (s.resource_version, s.status))
        decided = controller.memo.decide(observation.sjs, NOW, controller.lifecycle_config, on_error=None,
                                         draining=frozenset())
        runs = in_flight_now(controller.ledger, decided,
                             lambda s, exc: controller.quarantine.fault(s, "admission", exc))
        return runs.get(("ns", "work-r1"))

    first, again = in_flight(0), in_flight(0)
    assert first is not None and (first.key, first.pods, first.scheduled_pods) == ("ns/work", 3, 0)
    assert again is first, "the same pods and spec: the last pass's entry"
    one, two = in_flight(1), in_flight(2)
    assert (one.scheduled_pods, two.scheduled_pods) == (1, 2) and one.request == first.request
    assert in_flight(3) is None, "every pod scheduled: its room is counted on its node"


def test_the_runs_in_flight_keep_the_views_order_and_are_sorted_again_only_when_an_sj_came_or_the_layout_changed(
        controller):
    """Incremental passes: the runs in flight in the order of their SJs in the view (`Worklist.position`), kept
    from pass to pass while no entry changed and the layout is the same, the last order less the SJs gone while
    none came; each pass gets its own copy."""
    def starting(name: str) -> tuple[SJObject, JobView]:
        status = {"phase": "Starting", "attempt": 1, "jobName": f"{name}-r1", "launchedTimestamp": NOW.isoformat()}
        job = job_view({"metadata": {"namespace": "ns", "name": f"{name}-r1", "uid": f"j-{name}",
                                     "creationTimestamp": NOW.isoformat(),
                                     "labels": {"scavenger.dev/job-name": name}, "ownerReferences": owned_by(name)}})
        return sj(status, name=name), job

    made = [starting(name) for name in ("a", "b", "c")]
    v = view(*(s for s, _ in made), jobs={("ns", j.name): j for _, j in made})
    observation = controller.memo.observe(v, handles=None, fresh=lambda s: (s.resource_version, s.status))
    decided = controller.memo.decide(observation.sjs, NOW, controller.lifecycle_config, on_error=None,
                                     draining=frozenset())
    by_uid = {d.observed.sj.uid: d for d in decided}
    order = {"u-a": 0, "u-b": 1, "u-c": 2}

    def in_flight(names: str, layout: int, gone: tuple[str, ...] = ()) -> str:
        runs = in_flight_now(controller.ledger, [by_uid[f"u-{n}"] for n in names], lambda s, exc: None,
                                           gone={f"u-{n}" for n in gone}, position=order.__getitem__, layout=layout)
        keys = "".join(name.removesuffix("-r1") for _, name in runs)
        runs.clear()  # the caller's to change (`add_launched` adds to it)
        return keys

    assert in_flight("cab", layout=1) == "abc"
    order.update({"u-a": 2, "u-b": 1, "u-c": 0})  # (the positions move only with the layout; here to show it)
    assert in_flight("", layout=1) == "abc", "nothing changed: the last order, not sorted again"
    assert in_flight("", layout=1, gone=("b",)) == "ac", "an SJ gone: the last order less it"
    assert in_flight("b", layout=1) == "cba", "an SJ came: sorted again"
    order.update({"u-a": 0, "u-b": 2, "u-c": 1})
    assert in_flight("", layout=2) == "acb", "the layout moved: sorted again"
    order.update({"u-a": 0, "u-b": 1, "u-c": 2})
    assert in_flight("", layout=3) == "abc", "the SJs indexed anew: sorted again"


def test_an_incremental_pass_changes_a_run_in_flight_where_it_is_and_drops_the_run_an_sj_left(controller):
    """Between passes that sort nothing: a gang whose second pod was scheduled keeps its place with its new count;
    an SJ whose run is another (its next attempt) loses the old run's entry and gets the new one."""
    def decided_for(name: str, *, attempt: int = 1, parallelism: int = 1, scheduled: int = 0) -> Any:
        job_name = f"{name}-r{attempt}"
        status = {"phase": "Starting", "attempt": attempt, "jobName": job_name, "launchedTimestamp": NOW.isoformat()}
        job = job_view({"metadata": {"namespace": "ns", "name": job_name, "uid": f"j-{job_name}",
                                     "creationTimestamp": NOW.isoformat(),
                                     "labels": {"scavenger.dev/job-name": name}, "ownerReferences": owned_by(name)}})
        pods = tuple(PodView(namespace="ns", name=f"{job_name}-{i}", uid=f"p-{job_name}-{i}", sj=name, run=job_name,
                             node="n1" if i < scheduled else None, phase="Pending", deleting=False,
                             requests={"cpu": 1000}, all_running=False, index=i) for i in range(parallelism))
        v = view(sj(status, rv=f"{attempt}.{scheduled}", name=name, parallelism=parallelism),
                 jobs={("ns", job_name): job},
                 run_pods={("ns", job_name): pods})
        observation = controller.memo.observe(v, handles=None, fresh=lambda s: (s.resource_version, s.status))
        [d] = controller.memo.decide(observation.sjs, NOW, controller.lifecycle_config, on_error=None,
                                     draining=frozenset())
        return d

    order = {"u-a": 0, "u-b": 1}

    def in_flight(*decided: Any) -> dict[Any, Any]:
        return in_flight_now(controller.ledger, list(decided), lambda s, exc: None, gone=set(),
                                           position=order.__getitem__, layout=1)

    first = in_flight(decided_for("b"), decided_for("a", parallelism=3))
    assert [(name, run.scheduled_pods) for (_, name), run in first.items()] == [("a-r1", 0), ("b-r1", 0)]
    second = in_flight(decided_for("a", parallelism=3, scheduled=1))
    assert [(name, run.scheduled_pods) for (_, name), run in second.items()] == [("a-r1", 1), ("b-r1", 0)]
    third = in_flight(decided_for("b", attempt=2))
    assert [name for _, name in third] == ["a-r1", "b-r2"]


def _gang_decided(controller: Controller, pods: str, *, rv: str = "1", taken_up: bool = False,
                  name: str = "work", suspended: bool = False) -> Decided:
    """A Starting gang of three whose pods are, one letter each: ``-`` not made yet, ``u`` made and not looked at
    by the scheduler yet, ``g`` made and gated (`PodView.unclaimed`: no scheduler looks at it), ``n`` found no room
    by it (placed, unbound), ``b`` bound to a node; its Job ``taken_up`` by the Job controller (its startTime) or not
    yet, and ``suspended`` or not."""
    status = {"phase": "Starting", "attempt": 1, "jobName": f"{name}-r1", "launchedTimestamp": NOW.isoformat()}
    job = job_view({"metadata": {"namespace": "ns", "name": f"{name}-r1", "uid": f"j-{name}",
                                 "creationTimestamp": NOW.isoformat(), "labels": {"scavenger.dev/job-name": name},
                                 "ownerReferences": owned_by(name)},
                    "spec": {"suspend": suspended},
                    "status": {"startTime": NOW.isoformat()} if taken_up else {}})
    members = tuple(PodView(namespace="ns", name=f"{name}-r1-{i}", uid=f"p-{name}-{i}", sj=name, run=f"{name}-r1",
                            node="n1" if state == "b" else None, phase="Pending", deleting=False,
                            requests={"cpu": 1000}, all_running=False, index=i, unclaimed=state == "g",
                            placed=None if state in "ug" else NOW)
                    for i, state in enumerate(pods) if state != "-")
    v = view(sj(status, rv=rv, name=name, parallelism=3), jobs={("ns", f"{name}-r1"): job},
             run_pods={("ns", f"{name}-r1"): members})
    observation = controller.memo.observe(v, handles=None, fresh=lambda s: (s.resource_version, s.status))
    [d] = controller.memo.decide(observation.sjs, NOW, controller.lifecycle_config, on_error=None,
                                 draining=frozenset())
    return d


@pytest.mark.parametrize(("pods", "taken_up", "behind", "suspended"), [
    ("---", False, True, False),   # the Job controller has not taken the Job up yet
    ("---", False, False, True),   # ... suspended (a queueing controller's): it is not to, nothing is behind
    ("gg-", False, False, True),
    ("uu-", False, True, False),   # nor made all its pods
    ("gg-", True, False, False),   # pods gated, or of a scheduler not counted: no scheduler is to look at them
    ("bgg", True, False, False),
    ("ug-", True, True, False),
    ("---", True, False, False),   # it took it up and made none: it could not (a policy refusing them), no backlog
    ("nn-", True, False, False),
    ("uu-", True, True, False),    # the scheduler has not looked at the pods made yet
    ("uuu", True, True, False),
    ("bbu", True, True, False),    # ... one of them
    ("nnn", True, False, False),   # the scheduler found no room for any: decided, the run waits for room, not for it
    ("bnn", True, False, False),
    ("bbb", True, False, False),   # every pod scheduled: not in flight at all
])
def test_the_control_plane_is_behind_while_a_run_in_flight_has_its_job_not_taken_up_or_pods_not_looked_at(
        controller, pods, taken_up, behind, suspended, monkeypatch):
    """`Ledger.behind`, which Events wait for (here from one run behind): a run in flight whose Job the Job
    controller has not taken up, or whose pods the scheduler has not all looked at; whatever the pass before
    found."""
    monkeypatch.setattr("sj_operator.write.ledger.BEHIND_AT", 1)
    assert not controller.ledger.behind
    in_flight_now(controller.ledger, [_gang_decided(controller, "bbb", taken_up=True)], lambda s, exc: None)
    in_flight_now(controller.ledger, [_gang_decided(controller, pods, rv="2", taken_up=taken_up, suspended=suspended)],
                  lambda s, exc: None)
    assert controller.ledger.behind is behind


def test_the_control_plane_is_no_longer_behind_once_an_incremental_pass_finds_the_pods_looked_at_or_the_sj_gone(
        controller, monkeypatch):
    """Incremental passes (``gone`` given) change what the last pass found for the SJs they decide and those gone."""
    monkeypatch.setattr("sj_operator.write.ledger.BEHIND_AT", 1)
    ledger = controller.ledger

    def in_flight(*decided: Decided, gone: tuple[str, ...] = ()) -> bool:
        in_flight_now(ledger, list(decided), lambda s, exc: None, gone=set(gone), position=lambda uid: 0, layout=1)
        return ledger.behind

    assert in_flight(_gang_decided(controller, "uu-"))
    assert in_flight(), "nothing decided: the last pass's finding stands"
    assert not in_flight(_gang_decided(controller, "bnn", rv="2")), "its pods looked at"
    assert in_flight(_gang_decided(controller, "bnu", rv="3"))
    assert not in_flight(gone=("u-work",)), "the SJ gone"
    assert in_flight(_gang_decided(controller, "uuu", rv="4"))
    in_flight_now(ledger, [], lambda s, exc: None)
    assert not ledger.behind, "a full pass: what it found, none"


@pytest.mark.parametrize(("behind_runs", "launching", "behind"), [
    (0, 0, False),
    (1, 0, False),    # a run starting: not a backlog (nor one whose pods cannot be made)
    (15, 0, False),
    (16, 0, True),    # BEHIND_AT runs behind
    (15, 1, True),    # ... a launch under way among them
    (0, 16, True),
])
def test_the_control_plane_is_behind_from_a_number_of_runs_behind(controller, behind_runs, launching, behind):
    """A few runs under way to their pods are not a backlog: Events wait only from `BEHIND_AT` of them (a launch
    under way counts)."""
    from sj_operator.write.ledger import BEHIND_AT, Launching

    assert BEHIND_AT == 16
    ledger = controller.ledger
    decided = [_gang_decided(controller, "uu-", name=f"w{i}") for i in range(behind_runs)]
    in_flight_now(ledger, decided, lambda s, exc: None)
    for i in range(launching):
        ledger.begin_launch(f"l-{i}", Launching(f"ns/l{i}", ("ns", f"l{i}-r1"), None))  # type: ignore[arg-type]
    assert ledger.behind is behind


def _starting_sj(name: str, *, running: bool) -> tuple[SJObject, JobView, PodView]:
    """An SJ whose run was launched a minute ago; its pod pending, or ``running``."""
    job_name = f"{name}-r1"
    status = {"phase": "Starting", "interruptedCount": 0, "attempt": 1, "jobName": job_name,
              "launchedTimestamp": (NOW - timedelta(minutes=1)).isoformat()}
    job = job_view({"metadata": {"namespace": "ns", "name": job_name, "uid": f"j-{name}",
                                 "labels": {"scavenger.dev/job-name": name}, "ownerReferences": owned_by(name)}})
    pod = PodView(namespace="ns", name=f"{job_name}-0", uid=f"p-{name}", sj=name, run=job_name,
                  node="n1" if running else None, phase="Running" if running else "Pending", deleting=False,
                  requests={"cpu": 1000}, all_running=running, index=0, protected=False)
    return sj(status, name=name, duration="10m", priorityLevels=3), job, pod


def test_steering_waits_while_many_runs_start_and_goes_on_once_they_run(monkeypatch, kube):
    """With steering yielding from one run starting: "fresh" (its protection to drop) is not toggled while "new"'s
    pod is pending, as the last pass counted it; once "new" runs, the next pass toggles it."""
    monkeypatch.setattr("sj_operator.write.steering.STEERING_YIELDS_AT", 1)
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    fresh, fresh_job, fresh_pod = _running_sj("fresh", NOW - timedelta(minutes=1))
    fresh_scene = ({("ns", "fresh-r1"): fresh_job}, {("ns", "fresh-r1"): (fresh_pod,)})

    def scene(new_running: bool, rv: str, *, with_fresh: bool = True) -> ClusterView:
        new, new_job, new_pod = _starting_sj("new", running=new_running)
        jobs, pods = ({**fresh_scene[0]}, {**fresh_scene[1]}) if with_fresh else ({}, {})
        jobs[("ns", "new-r1")], pods[("ns", "new-r1")] = new_job, (new_pod,)
        sjs = (replace(new, resource_version=rv), *((fresh,) if with_fresh else ()))
        return view(*sjs, jobs=jobs, run_pods=pods, active=tuple(p for ps in pods.values() for p in ps))

    labelled = ("label", ("fresh-r1-0", {"scavenger.dev/protected": "false"}))
    run(controller, scene(False, "7", with_fresh=False))
    assert controller.gauges.starting == 1
    run(controller, scene(False, "8"))
    run(controller, scene(False, "9"))
    assert labelled not in kube.calls and controller.steering_lane.yielding
    run(controller, scene(True, "10"))  # "new" runs: this pass counts it so
    run(controller, scene(True, "11"))
    assert labelled in kube.calls and not controller.steering_lane.yielding


def test_an_sj_whose_routine_toggle_waits_is_set_aside_until_steering_goes_on(monkeypatch, kube):
    """While steering yields, "fresh" (its protection to drop at its period's start) is decided once and set aside:
    the passes after it do not decide it again, unless it changes, until `SET_ASIDE` has passed (what its clock
    brings is about that late). Once "new" runs, the lane asks for a pass, and that pass, with nothing else changed,
    decides "fresh" again and toggles it."""
    monkeypatch.setattr("sj_operator.write.steering.STEERING_YIELDS_AT", 1)
    wakes: list[None] = []
    clock = [NOW]
    controller = Controller(kube, OperatorConfig(), clock=lambda: clock[0],  # type: ignore[arg-type]
                            wake=lambda: wakes.append(None))
    fresh, fresh_job, fresh_pod = _running_sj("fresh", NOW - timedelta(minutes=1))
    current = [fresh]
    decided: list[str] = []
    decide = controller.memo.decide

    def counted(observed: list[Observed], *args: Any, **kwargs: Any) -> list[Decided]:
        decided.extend(o.sj.name for o in observed)
        return decide(observed, *args, **kwargs)

    monkeypatch.setattr(controller.memo, "decide", counted)

    def scene(new_running: bool, rv: str, *, with_fresh: bool = True) -> ClusterView:
        new, new_job, new_pod = _starting_sj("new", running=new_running)
        if not with_fresh:
            return view(replace(new, resource_version=rv), jobs={("ns", "new-r1"): new_job},
                        run_pods={("ns", "new-r1"): (new_pod,)}, active=(new_pod,))
        return view(replace(new, resource_version=rv), current[0],
                    jobs={("ns", "fresh-r1"): fresh_job, ("ns", "new-r1"): new_job},
                    run_pods={("ns", "fresh-r1"): (fresh_pod,), ("ns", "new-r1"): (new_pod,)},
                    active=(fresh_pod, new_pod))

    def passes(*scenes: ClusterView) -> list[str]:
        """The SJs the passes over ``scenes`` decided."""
        decided.clear()
        for v in scenes:
            run(controller, v)
        return list(decided)

    labelled = ("label", ("fresh-r1-0", {"scavenger.dev/protected": "false"}))
    run(controller, scene(False, "7", with_fresh=False))  # counts "new" as starting: the lane yields from now on
    assert controller.steering_lane.yielding
    run(controller, scene(False, "8"))
    assert labelled not in kube.calls
    assert fresh.uid in controller._kept.deferred and fresh.uid not in controller._kept.writing
    assert "fresh" not in passes(scene(False, "9"), scene(False, "10")), "set aside while the lane yields"
    current[0] = replace(fresh, resource_version="2")
    assert "fresh" in passes(scene(False, "10")), "a change has it decided at once"
    assert labelled not in kube.calls and fresh.uid in controller._kept.deferred, "and set aside again"
    clock[0] = NOW + SET_ASIDE
    assert "fresh" in passes(scene(False, "10")), "its time came"
    assert labelled not in kube.calls and fresh.uid in controller._kept.deferred
    assert "fresh" not in passes(scene(False, "10"))
    wakes.clear()
    run(controller, scene(True, "11"))  # "new" runs: this pass counts it so, and the lane asks for a pass
    assert not controller.steering_lane.yielding and wakes
    assert "fresh" in passes(scene(True, "11")) and labelled in kube.calls
    assert fresh.uid not in controller._kept.deferred


def test_a_run_the_job_controller_has_not_taken_up_holds_its_room_unrecorded():
    """"a"'s run (4 of the node's 5.6 usable CPU), made five minutes ago by another replica, has not been taken up
    by the Job controller (no startTime): it is not written into "a"'s status, and it keeps its room: "c" (4 CPU)
    is not admitted."""
    kube = FakeKube()
    controller = Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]
    a = sj(name="a", cpu="4", created=NOW - timedelta(minutes=6), status={"phase": "Pending", "attempt": 0})
    untaken = job_view({"metadata": {"namespace": "ns", "name": "a-r1", "uid": "j-a",
                                     "labels": {"scavenger.dev/job-name": "a"}, "ownerReferences": owned_by("a"),
                                     "creationTimestamp": (NOW - timedelta(minutes=5)).isoformat()}})
    run(controller, view(a, sj(name="c", cpu="4"), jobs={("ns", "a-r1"): untaken}))
    assert _records(kube, "a-r1") == []
    assert launched(kube) == []
