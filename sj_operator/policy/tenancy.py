"""What an SJ's namespace allows its runs: whether a whole gang fits the namespace's ResourceQuotas.

The operator runs SJs with no more than their namespace allows its own users. One pod is tried against
every admission rule of the namespace (Pod Security, quotas, policies) by a server-side dry run before
a run is made; a gang needs all its pods at once, which a dry run of one pod cannot tell, so its sum is
checked here against each quota's ``hard`` less its ``used``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sj_operator.resources import resources_milli

# Quota names a pod's requests or limits count against, and what each counts.
_REQUESTS = {"cpu": "cpu", "requests.cpu": "cpu", "memory": "memory", "requests.memory": "memory",
             "requests.ephemeral-storage": "ephemeral-storage", "ephemeral-storage": "ephemeral-storage"}
_LIMITS = {"limits.cpu": "cpu", "limits.memory": "memory", "limits.ephemeral-storage": "ephemeral-storage"}
_POD_COUNTS = ("pods", "count/pods")


@dataclass(frozen=True)
class ResourceQuotaView:
    """A ResourceQuota as its status shows it: what is allowed and what is used, in milli-units."""

    namespace: str
    name: str
    hard: Mapping[str, int]
    used: Mapping[str, int]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def resource_quota_view(raw: Mapping[str, Any]) -> ResourceQuotaView:
    """A ResourceQuota object (as the API returns it) as a :class:`ResourceQuotaView`."""
    status, metadata = _mapping(raw.get("status")), _mapping(raw.get("metadata"))
    return ResourceQuotaView(name=str(metadata.get("name", "")), namespace=str(metadata.get("namespace", "")),
                             hard=resources_milli(_mapping(status.get("hard"))),
                             used=resources_milli(_mapping(status.get("used"))))


def _gang_usage(name: str, requests: Mapping[str, int], limits: Mapping[str, int], pods: int) -> int | None:
    """What ``pods`` pods of these requests and limits add to quota ``name`` (None: it does not count them)."""
    if name in _POD_COUNTS:
        return pods * 1000
    if name in _REQUESTS:
        return pods * requests.get(_REQUESTS[name], 0)
    if name.startswith("requests."):
        return pods * requests.get(name.removeprefix("requests."), 0)
    if name in _LIMITS:
        return pods * limits.get(_LIMITS[name], 0)
    if name.startswith("limits."):
        return pods * limits.get(name.removeprefix("limits."), 0)
    return None


def _amount(name: str, milli: int) -> str:
    if name in _POD_COUNTS:
        return str(milli // 1000)
    if "cpu" in name:
        return f"{milli}m" if milli % 1000 else str(milli // 1000)
    return str(-(-milli // 1000))


def quota_shortfall(quotas: Sequence[ResourceQuotaView], requests: Mapping[str, int], limits: Mapping[str, int],
                    pods: int) -> str | None:
    """Why ``pods`` pods (each with these requests and limits, milli-units) do not fit the namespace's
    quotas now, naming the quota and the numbers; None when they fit."""
    for quota in quotas:
        for name, hard in sorted(quota.hard.items()):
            adds = _gang_usage(name, requests, limits, pods)
            if adds is None or adds == 0:
                continue
            used = quota.used.get(name, 0)
            if used + adds > hard:
                return (f"ResourceQuota {quota.name}: {pods} pod(s) need {name} {_amount(name, adds)}, "
                        f"{_amount(name, max(hard - used, 0))} of {_amount(name, hard)} is free")
    return None
