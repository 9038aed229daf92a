"""The decision loop's I/O step against a fake API: what it writes, in which order, and that an
API failure or a stale cache never loses or duplicates an SJ."""
from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Any

import pytest

from sj_operator.config import OperatorConfig
from sj_operator.controller import ClusterView, Controller
from sj_operator.kube import Conflict, KubeError
from sj_operator.observed import NodeInfo, SJObject, job_view

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=timezone.utc)


class FakeKube:
    """Records calls; `fail` maps a method name to the errors its next calls raise."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail: dict[str, list[Exception]] = {}
        self.rv = 100

    def _maybe_fail(self, name: str) -> None:
        errors = self.fail.get(name)
        if errors:
            raise errors.pop(0)

    async def patch_sj_status(self, namespace, name, status, resource_version):
        self._maybe_fail("patch_sj_status")
        self.calls.append(("status", dict(status)))
        self.rv += 1
        return {"metadata": {"resourceVersion": str(self.rv)}, "status": dict(status)}

    async def create_job(self, job):
        self._maybe_fail("create_job")
        self.calls.append(("job", job["metadata"]["name"]))

    async def create_service(self, svc):
        self.calls.append(("service", svc["metadata"]["name"]))

    async def create_or_keep(self, create):
        try:
            await create()
            return True
        except Conflict:
            return False

    async def apply_pdb(self, pdb):
        self.calls.append(("pdb", pdb["metadata"]["name"]))

    async def delete_job(self, namespace, name):
        self.calls.append(("delete-job", name))

    async def delete_service(self, namespace, name):
        self.calls.append(("delete-service", name))

    async def exists(self, kind, namespace, name):
        return True

    async def event(self, **kw):
        self.calls.append(("event", kw["reason"]))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.calls]


def sj(status: dict[str, Any] | None = None, rv: str = "7", **spec: Any) -> SJObject:
    return SJObject(namespace="ns", name="work", uid="u-1", generation=1, resource_version=rv,
                    created=NOW, deleting=False,
                    spec={"image": "busybox", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}, **spec},
                    status=status or {})


def view(*sjs: SJObject, jobs: dict | None = None) -> ClusterView:
    node = NodeInfo(name="n1", allocatable={"cpu": 8000, "memory": 32 * 2**30 * 1000, "pods": 110_000},
                    labels={}, taints=(), unschedulable=False, ready=True)
    return ClusterView(sjs=sjs, jobs=jobs or {}, run_pods={}, active_pods=(), nodes=(node,))


def run(controller: Controller, v: ClusterView) -> None:
    asyncio.run(controller.reconcile(v))


@pytest.fixture
def kube() -> FakeKube:
    return FakeKube()


@pytest.fixture
def controller(kube: FakeKube) -> Controller:
    return Controller(kube, OperatorConfig(), clock=lambda: NOW)  # type: ignore[arg-type]


def test_new_sj_is_queued_and_launched_in_one_pass_job_before_status(controller, kube):
    run(controller, view(sj()))
    assert kube.kinds() == ["status", "event", "pdb", "job", "status", "event"]
    assert kube.calls[0][1]["phase"] == "Pending" and kube.calls[1] == ("event", "Queued")
    assert kube.calls[3] == ("job", "work-r1")
    assert kube.calls[4][1]["phase"] == "Starting" and kube.calls[4][1]["jobName"] == "work-r1"
    assert kube.calls[5] == ("event", "Launched")


def test_failed_launch_leaves_the_sj_waiting_and_a_later_pass_launches_it(controller, kube):
    pending = sj({"phase": "Pending", "interruptedCount": 0})
    kube.fail["create_job"] = [KubeError(503, "Service Unavailable")]
    run(controller, view(pending))
    assert "status" not in kube.kinds(), "nothing recorded for a run that was not created"
    run(controller, view(pending))
    assert ("job", "work-r1") in kube.calls
    assert [c for c in kube.calls if c[0] == "status"][-1][1]["phase"] == "Starting"


def test_status_conflict_writes_nothing_else_and_the_next_pass_decides_again(controller, kube):
    kube.fail["patch_sj_status"] = [Conflict(409, "Conflict")]
    run(controller, view(sj()))
    assert kube.kinds() == [], "a decision on stale data is dropped whole"
    run(controller, view(sj(rv="9")))
    assert kube.calls[0][1]["phase"] == "Pending"


def test_stale_cache_after_a_launch_does_not_launch_twice(controller, kube):
    pending = sj({"phase": "Pending", "interruptedCount": 0})
    run(controller, view(pending))
    assert kube.kinds().count("job") == 1
    # The watch has not delivered the status write yet: the same stale SJ is seen again.
    run(controller, view(pending))
    assert kube.kinds().count("job") == 1


def test_run_of_no_sj_is_deleted_but_a_just_launched_one_is_kept(controller, kube):
    stray = job_view({"metadata": {"namespace": "ns", "name": "gone-r3", "uid": "j",
                                   "labels": {"scavenger.dev/job-name": "gone"}}})
    launched = job_view({"metadata": {"namespace": "ns", "name": "work-r1", "uid": "k",
                                      "labels": {"scavenger.dev/job-name": "work"}}})
    # work-r1 exists but the SJ's status does not name it yet (its write was lost): it is adopted.
    run(controller, view(sj({"phase": "Pending", "interruptedCount": 0}),
                         jobs={("ns", "gone-r3"): stray, ("ns", "work-r1"): launched}))
    assert ("delete-job", "gone-r3") in kube.calls
    assert ("delete-job", "work-r1") not in kube.calls
    assert kube.kinds().count("job") == 0
    adopted = [c[1] for c in kube.calls if c[0] == "status"][-1]
    assert adopted["phase"] == "Starting" and adopted["jobName"] == "work-r1" and adopted["attempt"] == 1
