"""scavenger-netd (hack/kind/netd.py), the kind node image's pod network: its pure parts."""
from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.unit.scripts import load_script

NETD = Path(__file__).resolve().parents[2] / "hack/kind/netd.py"


@pytest.fixture(scope="module")
def netd() -> ModuleType:
    return load_script(NETD, "scavenger_netd")


def node(name: str, cidr: str | None, *addresses: tuple[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"podCIDR": cidr} if cidr else {},
            "status": {"addresses": [{"type": t, "address": a} for t, a in addresses]}}


@pytest.mark.parametrize(("env", "want"), [
    ({"CONTROL_PLANE_ENDPOINT": "k-control-plane:6443", "KUBERNETES_SERVICE_HOST": "10.96.0.1",
      "KUBERNETES_SERVICE_PORT": "443"}, "k-control-plane:6443"),
    ({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, "10.96.0.1:443"),
])
def test_the_api_server_is_kinds_endpoint_else_the_service(netd: ModuleType, env: dict[str, str], want: str) -> None:
    assert netd.api_endpoint(env) == want


def test_routes_go_to_every_other_node_with_a_cidr_and_an_ipv4_address(netd: ModuleType) -> None:
    nodes = [node("me", "10.244.0.0/24", ("InternalIP", "172.18.0.2")),
             node("w1", "10.244.1.0/24", ("InternalIP", "fc00::3"), ("InternalIP", "172.18.0.3")),
             node("w2", None, ("InternalIP", "172.18.0.4")),  # no podCIDR yet
             node("w3", "10.244.3.0/24", ("Hostname", "w3"))]  # no address yet
    assert netd.routes(nodes, "me") == {"10.244.1.0/24": "172.18.0.3"}


def test_the_cni_configuration_hands_out_the_nodes_cidr(netd: ModuleType) -> None:
    conf = netd.conflist("10.244.2.0/24")
    ptp, portmap = conf["plugins"]
    assert ptp["type"] == "ptp" and ptp["ipam"]["ranges"] == [[{"subnet": "10.244.2.0/24"}]]
    assert portmap["type"] == "portmap"
