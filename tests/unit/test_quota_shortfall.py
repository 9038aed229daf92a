"""Why a gang does not fit a namespace's Kubernetes ResourceQuotas (`policy.tenancy.quota_shortfall`): which
quota names count a pod's requests, its limits or the pod itself, what a missing request adds (nothing), where
"fits" ends (used + added == hard still fits), and how the amounts read (whole pods, millicores or cores,
other resources rounded up to whole units)."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from sj_operator.policy.tenancy import ResourceQuotaView, quota_shortfall, resource_quota_view

CPU = 1000
GI = 1024**3 * 1000
"""Milli-units: one core, one GiB."""


def quota(name: str, hard: dict[str, int], used: dict[str, int] | None = None) -> ResourceQuotaView:
    return ResourceQuotaView(namespace="team", name=name, hard=hard, used=used or {})


@dataclass(frozen=True)
class Case:
    quotas: list[ResourceQuotaView]
    pods: int
    shortfall: str | None
    requests: dict[str, int] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)


CASES = {
    "a pod count quota counts whole pods": Case(
        [quota("q", {"pods": 3000}, {"pods": 2000})], pods=2,
        shortfall="ResourceQuota q: 2 pod(s) need pods 2, 1 of 3 is free"),
    "count/pods counts pods too": Case(
        [quota("q", {"count/pods": 1000})], pods=2,
        shortfall="ResourceQuota q: 2 pod(s) need count/pods 2, 1 of 1 is free"),
    "the bare cpu name counts requests, in millicores when not whole": Case(
        [quota("q", {"cpu": 4 * CPU}, {"cpu": 3 * CPU})], pods=1, requests={"cpu": 1500},
        shortfall="ResourceQuota q: 1 pod(s) need cpu 1500m, 1 of 4 is free"),
    "requests.cpu counts requests, whole cores as cores": Case(
        [quota("q", {"requests.cpu": 3 * CPU})], pods=2, requests={"cpu": 2 * CPU},
        shortfall="ResourceQuota q: 2 pod(s) need requests.cpu 4, 3 of 3 is free"),
    "requests.<extended resource> counts that resource's requests": Case(
        [quota("q", {"requests.nvidia.com/gpu": 2000}, {"requests.nvidia.com/gpu": 1000})], pods=2,
        requests={"nvidia.com/gpu": 1000},
        shortfall="ResourceQuota q: 2 pod(s) need requests.nvidia.com/gpu 2, 1 of 2 is free"),
    "limits.memory counts limits, rounded up to whole bytes": Case(
        [quota("q", {"limits.memory": GI}, {"limits.memory": GI - 1500})], pods=1, requests={"memory": GI},
        limits={"memory": 2 * GI},
        shortfall=f"ResourceQuota q: 1 pod(s) need limits.memory {2 * GI // 1000}, 2 of {GI // 1000} is free"),
    "limits.<extended resource> counts that resource's limits": Case(
        [quota("q", {"limits.example.com/fpga": 1000})], pods=3, limits={"example.com/fpga": 1000},
        shortfall="ResourceQuota q: 3 pod(s) need limits.example.com/fpga 3, 1 of 1 is free"),
    "a limit the pods do not set adds nothing, even to a full quota": Case(
        [quota("q", {"limits.memory": GI}, {"limits.memory": GI})], pods=4, requests={"memory": GI},
        shortfall=None),
    "a request the pods do not set adds nothing, even to a full quota": Case(
        [quota("q", {"requests.memory": GI, "requests.nvidia.com/gpu": 1000},
               {"requests.memory": GI, "requests.nvidia.com/gpu": 1000})], pods=4, limits={"memory": GI},
        shortfall=None),
    "using a quota up exactly still fits": Case(
        [quota("q", {"pods": 4000, "memory": 4 * GI}, {"pods": 2000, "memory": 2 * GI})], pods=2,
        requests={"memory": GI}, shortfall=None),
    "what a quota does not count is not checked": Case(
        [quota("q", {"services": 0, "count/configmaps": 0})], pods=2, requests={"cpu": CPU}, shortfall=None),
    "more used than hard leaves nothing free, not less": Case(
        [quota("q", {"memory": GI}, {"memory": 2 * GI})], pods=1, requests={"memory": GI},
        shortfall=f"ResourceQuota q: 1 pod(s) need memory {GI // 1000}, 0 of {GI // 1000} is free"),
    "the first quota short is named, its names in order": Case(
        [quota("roomy", {"cpu": 100 * CPU}), quota("tight", {"pods": 1000, "cpu": CPU})], pods=2,
        requests={"cpu": CPU},
        shortfall="ResourceQuota tight: 2 pod(s) need cpu 2, 1 of 1 is free"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_gang_fits_the_resource_quotas_or_is_told_which_and_by_how_much(case: Case) -> None:
    assert quota_shortfall(case.quotas, case.requests, case.limits, case.pods) == case.shortfall


def test_a_resource_quota_is_read_in_milli_units_and_tolerantly() -> None:
    raw = {"metadata": {"name": "q", "namespace": "team"},
           "status": {"hard": {"cpu": "2", "memory": "1Gi"}, "used": {"cpu": "500m"}}}
    assert resource_quota_view(raw) == quota("q", {"cpu": 2 * CPU, "memory": GI}, {"cpu": 500})
    assert resource_quota_view({"status": "?"}) == ResourceQuotaView(namespace="", name="", hard={}, used={})
