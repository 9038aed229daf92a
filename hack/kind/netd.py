#!/usr/bin/python3
"""scavenger-netd: the pod network of the kind node image made by ``hack/images kind-node``.

It does on its node what kindnetd does in kind's published images (kindnetd is not served as a Go
module, so it cannot be built here): writes the CNI configuration (Debian's ptp and host-local plugins
over the node's podCIDR, and portmap), and keeps a route to every other node's podCIDR through that
node's InternalIP. The nodes share one Docker network, so one hop reaches each. It reads the nodes every
INTERVAL seconds and logs every change; only the standard library, python3 and ``ip`` are needed.
"""
from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from typing import Any

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
CONFLIST = "/etc/cni/net.d/10-scavenger-netd.conflist"
INTERVAL = 10.0


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} scavenger-netd: {message}", flush=True)


def api_endpoint(env: dict[str, str]) -> str:
    """host:port of the API server: kind's control-plane endpoint (no Service routing needed yet)."""
    endpoint = env.get("CONTROL_PLANE_ENDPOINT")
    if endpoint:
        return endpoint
    return f"{env['KUBERNETES_SERVICE_HOST']}:{env['KUBERNETES_SERVICE_PORT']}"


def list_nodes(endpoint: str) -> list[dict[str, Any]]:
    with open(f"{SERVICE_ACCOUNT}/token") as f:
        token = f.read().strip()
    context = ssl.create_default_context(cafile=f"{SERVICE_ACCOUNT}/ca.crt")
    request = urllib.request.Request(f"https://{endpoint}/api/v1/nodes",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        items: list[dict[str, Any]] = json.load(response)["items"]
    return items


def internal_ip(node: dict[str, Any]) -> str | None:
    for address in node.get("status", {}).get("addresses", []):
        if address.get("type") == "InternalIP" and ":" not in address.get("address", ""):
            return str(address["address"])
    return None


def pod_cidr(node: dict[str, Any]) -> str | None:
    cidr = node.get("spec", {}).get("podCIDR")
    return str(cidr) if cidr else None


def conflist(cidr: str) -> dict[str, Any]:
    """The CNI configuration of a node whose pods take addresses from CIDR."""
    return {
        "cniVersion": "0.4.0",
        "name": "scavenger-netd",
        "plugins": [
            {"type": "ptp", "ipMasq": False, "mtu": 1500,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": cidr}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def routes(nodes: list[dict[str, Any]], me: str) -> dict[str, str]:
    """podCIDR -> next hop, for every other node that has both."""
    out: dict[str, str] = {}
    for node in nodes:
        cidr, ip = pod_cidr(node), internal_ip(node)
        if node["metadata"]["name"] != me and cidr and ip:
            out[cidr] = ip
    return out


def write_conflist(cidr: str) -> bool:
    """Writes the node's CNI configuration when it differs; whether it did."""
    text = json.dumps(conflist(cidr), indent=2) + "\n"
    try:
        with open(CONFLIST) as f:
            if f.read() == text:
                return False
    except FileNotFoundError:
        pass
    tmp = f"{CONFLIST}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, CONFLIST)
    return True


def sync(nodes: list[dict[str, Any]], me: str, done: dict[str, str]) -> None:
    mine = next((n for n in nodes if n["metadata"]["name"] == me), None)
    cidr = pod_cidr(mine) if mine is not None else None
    if cidr is None:
        log(f"node {me} has no podCIDR yet")
        return
    if write_conflist(cidr):
        log(f"CNI configuration written for {cidr}")
    for dst, via in routes(nodes, me).items():
        if done.get(dst) == via:
            continue
        subprocess.run(["ip", "route", "replace", dst, "via", via], check=True)
        done[dst] = via
        log(f"route {dst} via {via}")


def main() -> int:
    me = os.environ["NODE_NAME"]
    endpoint = api_endpoint(dict(os.environ))
    log(f"on {me}, API server {endpoint}")
    done: dict[str, str] = {}
    while True:
        try:
            sync(list_nodes(endpoint), me, done)
        except (OSError, ValueError, KeyError, subprocess.CalledProcessError) as error:
            log(f"retrying in {INTERVAL:.0f}s: {error}")
            done.clear()
        time.sleep(INTERVAL)


if __name__ == "__main__":
    sys.exit(main())
