"""The headless Service that gives a gang's pods stable DNS names (``<job>-<index>.<job>``), and the
EndpointSlice that says which pod each name is.

The Service has no selector: the operator writes its one EndpointSlice itself, from the pods it watches
anyway (`write.endpoints`). With a selector, the controller manager's endpoints and EndpointSlice
controllers would sync the Service on every change of one of its pods, each sync walking every pod of the
namespace: their work grows with the gangs' pod changes times the namespace's pods. Cluster DNS reads the
slice as it reads the controllers' (``kubernetes.io/service-name``); every member with an address is
published as ready, as ``publishNotReadyAddresses`` would, so members resolve each other while they start.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any, Final, NamedTuple

from sj_operator.names import LABEL_RUN, child_metadata
from sj_operator.observed import PodView

__all__ = ["LABEL_MANAGED_BY", "LABEL_SERVICE_NAME", "SLICE_MANAGER", "Member", "build_gang_endpoints",
           "build_gang_service", "gang_members"]

LABEL_SERVICE_NAME: Final = "kubernetes.io/service-name"
"""The label that ties an EndpointSlice to its Service (what cluster DNS and kube-proxy read)."""
LABEL_MANAGED_BY: Final = "endpointslice.kubernetes.io/managed-by"
SLICE_MANAGER: Final = "scavenger.dev"
"""Its value on the slices the operator writes: the controller manager leaves them alone."""


def build_gang_service(*, job_name: str, namespace: str, sj_name: str, sj_uid: str) -> dict[str, Any]:
    """Named after the run, headless and without a selector (its slice is the operator's,
    `build_gang_endpoints`)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(name=job_name, namespace=namespace, sj_name=sj_name, sj_uid=sj_uid,
                                   labels={LABEL_RUN: job_name}),
        "spec": {"clusterIP": "None"},
    }


class Member(NamedTuple):
    """One gang member as its run's EndpointSlice publishes it."""
    hostname: str
    ip: str
    pod: str
    uid: str
    node: str | None
    terminating: bool


def gang_members(pods: Iterable[PodView]) -> tuple[Member, ...]:
    """The members a run's slice publishes, by hostname: its pods named under its Service that have an
    address and have not ended (a pod being deleted stays, as terminating, until it is gone)."""
    return tuple(sorted(
        Member(pod.hostname, pod.ip, pod.name, pod.uid, pod.node, pod.deleting)
        for pod in pods if pod.hostname is not None and pod.ip is not None and not pod.terminal))


def _family(ip: str) -> str | None:
    try:
        return "IPv6" if ipaddress.ip_address(ip).version == 6 else "IPv4"
    except ValueError:
        return None


def build_gang_endpoints(*, job_name: str, namespace: str, sj_name: str, sj_uid: str,
                         members: Iterable[Member]) -> dict[str, Any]:
    """The run's EndpointSlice, named after it, with its members of the first member's address family (a
    cluster gives each pod one primary address, all of one family); every one ready."""
    listed = [(m, family) for m in members if (family := _family(m.ip)) is not None]
    kind = listed[0][1] if listed else "IPv4"
    endpoints: list[dict[str, Any]] = []
    for m, family in listed:
        if family != kind:
            continue
        endpoint: dict[str, Any] = {
            "addresses": [m.ip], "hostname": m.hostname,
            "conditions": {"ready": True, "serving": True, "terminating": m.terminating},
            "targetRef": {"kind": "Pod", "namespace": namespace, "name": m.pod, "uid": m.uid},
        }
        if m.node:
            endpoint["nodeName"] = m.node
        endpoints.append(endpoint)
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": child_metadata(name=job_name, namespace=namespace, sj_name=sj_name, sj_uid=sj_uid,
                                   labels={LABEL_RUN: job_name, LABEL_SERVICE_NAME: job_name,
                                           LABEL_MANAGED_BY: SLICE_MANAGER}),
        "addressType": kind,
        "endpoints": endpoints,
    }
