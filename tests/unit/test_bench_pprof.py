"""`benchmarks/harness/pprof.py`: a Go CPU profile read from its protobuf, and its stacks summed by what spent
them (the controller manager's controllers, the API server's kinds of request)."""
from __future__ import annotations

import gzip
import threading
from collections.abc import Sequence

import pytest

from benchmarks.harness.pprof import (
    ControlPlaneProfiles,
    Sample,
    apiserver_part,
    by_component,
    controller_part,
    decode,
    parts,
    secure_port,
)


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # an int64 as protobuf writes it: two's complement
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


def packed(*values: int) -> bytes:
    return b"".join(varint(v) for v in values)


def profile(stacks: Sequence[tuple[Sequence[Sequence[str]], int]], *, types: Sequence[str] = ("samples", "cpu"),
            pack: bool = True) -> bytes:
    """A profile as Go writes one: ``stacks`` of locations (leaf first), each location its functions (inlined ones
    first), with their nanoseconds; the string table's first entry empty, as the format has it."""
    strings = [""]

    def index(s: str) -> int:
        if s not in strings:
            strings.append(s)
        return strings.index(s)

    out = b"".join(field(1, field(1, index(t)) + field(2, index("count" if t == "samples" else "nanoseconds")))
                   for t in types)
    functions: dict[str, int] = {}
    location_ids: dict[tuple[str, ...], int] = {}
    body = b""
    for locations, nanos in stacks:
        ids = []
        for location in locations:
            key = tuple(location)
            if key not in location_ids:
                location_ids[key] = len(location_ids) + 1
                lines = b""
                for name in location:  # none: a location that was not symbolized
                    if name not in functions:
                        functions[name] = len(functions) + 1
                        body += field(5, field(1, functions[name]) + field(2, index(name)) + field(4, index("f.go")))
                    lines += field(4, field(1, functions[name]) + field(2, 7))
                body += field(4, field(1, location_ids[key]) + field(3, 0x4000) + lines)
            ids.append(location_ids[key])
        values = [nanos // 10_000_000, nanos]
        sample = (field(1, packed(*ids)) if pack else b"".join(field(1, i) for i in ids))
        sample += field(2, packed(*values)) if pack else b"".join(field(2, v) for v in values)
        out += field(2, sample)
    return out + body + b"".join(field(6, s.encode()) for s in strings) + field(12, 10_000_000)


@pytest.mark.parametrize("pack", [True, False], ids=["packed", "unpacked"])
@pytest.mark.parametrize("zipped", [True, False], ids=["gzipped", "plain"])
def test_a_profile_gives_each_stack_leaf_first_with_its_cpu_seconds(pack: bool, zipped: bool) -> None:
    data = profile([([["inlined", "leaf"], ["root"]], 30_000_000), ([["root"]], 10_000_000)], pack=pack)
    got = decode(gzip.compress(data) if zipped else data)
    assert got == [Sample(("inlined", "leaf", "root"), 0.03), Sample(("root",), 0.01)]


def test_a_negative_value_and_a_location_without_its_functions_are_read_as_such() -> None:
    got = decode(profile([([[], ["root"]], -20_000_000)]))
    assert got == [Sample(("?location 1", "root"), -0.02)]


def test_a_profile_without_cpu_values_is_refused() -> None:
    with pytest.raises(ValueError, match="not a CPU profile"):
        decode(profile([([["f"]], 1)], types=("alloc_objects", "alloc_space")))


@pytest.mark.parametrize("data", [b"\x0f\x00", b"\x08"], ids=["wire type 7", "ends inside a number"])
def test_bytes_that_are_no_profile_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a profile"):
        decode(data)


CONTROLLER = "k8s.io/kubernetes/pkg/controller/"


@pytest.mark.parametrize(("stack", "part"), [
    # the controller nearest the root: its worker, whatever helpers run under it
    (("k8s.io/client-go/tools/cache.ListAllByNamespace", f"{CONTROLLER}endpointslice.(*Controller).syncService",
      f"{CONTROLLER}endpointslice.(*Controller).worker"), "endpointslice"),
    (("runtime.mapaccess2", f"{CONTROLLER}job.(*Controller).syncJob", "k8s.io/kubernetes/pkg/controller.FilterPods",
      f"{CONTROLLER}job.(*Controller).processNextWorkItem"), "job"),
    # an informer's handler of an event, in the controller's package
    ((f"{CONTROLLER}endpoint.(*Controller).updatePod", "k8s.io/client-go/tools/cache.(*processorListener).run"),
     "endpoint"),
    # a subpackage's name is the controller's, but the volume controllers' own packages are each a controller
    ((f"{CONTROLLER}nodelifecycle/scheduler.(*TimedWorkerQueue).Add",), "nodelifecycle"),
    ((f"{CONTROLLER}volume/attachdetach.(*attachDetachController).podAdd",), "volume/attachdetach"),
    (("runtime.scanobject", "runtime.gcBgMarkWorker"), "Go GC"),
    (("runtime.sweepone", "runtime.bgsweep"), "Go GC"),
    (("k8s.io/client-go/tools/cache.(*Reflector).watch",), "informers"),
    (("k8s.io/apimachinery/pkg/runtime.Decode", "k8s.io/apimachinery/pkg/watch.(*StreamWatcher).receive"),
     "informers"),
    # the package of controller helpers is no controller
    (("k8s.io/kubernetes/pkg/controller.(*ControllerExpectations).Lower", "runtime.goexit"), "other"),
    ((), "other"),
])
def test_the_controller_managers_cpu_goes_to_the_controller_whose_code_runs(stack: tuple[str, ...], part: str) -> None:
    assert controller_part(stack) == part


HANDLERS = "k8s.io/apiserver/pkg/endpoints/handlers."


@pytest.mark.parametrize(("stack", "part"), [
    # a watch is served by ListResource: it is a watch
    ((f"{HANDLERS}(*watchEncoder).Encode", f"{HANDLERS}serveWatchHandler", f"{HANDLERS}ListResource.func1"), "watch"),
    ((f"{HANDLERS}ListResource.func1", "net/http.HandlerFunc.ServeHTTP"), "get and list"),
    # a request's storage work (through the watch cache's delegator) is the request's
    (("k8s.io/apiserver/pkg/storage/etcd3.(*store).GuaranteedUpdate",
      "k8s.io/apiserver/pkg/storage/cacher.(*CacheDelegator).GuaranteedUpdate", f"{HANDLERS}(*patcher).patchResource",
      "k8s.io/apiserver/pkg/endpoints/handlers/finisher.finishRequest.func1"), "patch"),
    ((f"{HANDLERS}UpdateResource.func1.4",), "update"),
    ((f"{HANDLERS}CreateNamedResource.createHandler.func1.2",), "create"),
    ((f"{HANDLERS}DeleteResource.func1",), "delete"),
    (("k8s.io/apiserver/pkg/storage/cacher.(*cacheWatcher).processInterval",), "watch cache"),
    (("go.etcd.io/etcd/client/v3.(*watchGRPCStream).run",), "etcd"),
    (("k8s.io/apiserver/pkg/storage/etcd3.(*watchChan).transform",), "etcd"),
    (("crypto/tls.(*Conn).Write", "golang.org/x/net/http2.(*serverConn).writeFrameAsync"), "HTTP, TLS and filters"),
    (("runtime.gcDrain", "runtime.gcBgMarkWorker"), "Go GC"),
    (("runtime.goexit",), "other"),
])
def test_the_api_servers_cpu_goes_to_the_kind_of_request_it_serves(stack: tuple[str, ...], part: str) -> None:
    assert apiserver_part(stack) == part


def test_parts_sum_the_samples_the_most_first() -> None:
    samples = [Sample(("a",), 0.5), Sample(("b",), 2.0), Sample(("a",), 1.0), Sample(("c",), 1.5)]
    assert list(parts(samples, lambda stack: stack[0]).items()) == [("b", 2.0), ("a", 1.5), ("c", 1.5)]


def test_the_figures_read_back_by_component() -> None:
    figures = {"kube-apiserver create": 3.0, "kube-apiserver Go GC": 1.0, "kube-controller-manager job": 2.0}
    assert by_component(figures) == {"kube-apiserver": {"create": 3.0, "Go GC": 1.0},
                                     "kube-controller-manager": {"job": 2.0}}


@pytest.mark.parametrize(("cmdline", "port"), [
    ("/x/bin/kube-controller-manager --leader-elect=false --secure-port=32762 --v=2", 32762),
    ("/x/bin/kube-controller-manager --secure-port=1 --secure-port=2", 2),  # the last, as flags parse
    ("/x/bin/kube-controller-manager --port=5", None),
    ("/x/bin/kube-controller-manager --secure-port=", None),
])
def test_a_components_secure_port_is_read_from_its_command_line(cmdline: str, port: int | None) -> None:
    assert secure_port(cmdline) == port


def test_profiles_are_taken_back_to_back_until_stopped_and_summed_by_component_and_part() -> None:
    taken: list[int] = []
    stopping = threading.Event()

    def take(seconds: int) -> bytes:
        taken.append(seconds)
        if len(taken) == 3:
            stopping.set()
        return profile([([["f"]], 2_000_000_000), ([["g"]], 1_000_000_000)])

    def refused(seconds: int) -> bytes:
        raise OSError("403 Forbidden")

    later: list[int] = []

    def fails_later(seconds: int) -> bytes:
        later.append(seconds)
        if len(later) > 1:
            raise TimeoutError("the second window timed out")
        return profile([([["h"]], 1_000_000_000)])

    profiles = ControlPlaneProfiles({"kube-apiserver": (take, lambda stack: f"part {stack[0]}"),
                                     "kube-controller-manager": (refused, controller_part),
                                     "kube-scheduler": (fails_later, controller_part)}, window=7)
    assert stopping.wait(10)
    got = profiles.seconds()
    assert set(taken) == {7} and len(taken) >= 3
    assert got == {"kube-apiserver part f": 2.0 * len(taken), "kube-apiserver part g": 1.0 * len(taken)}, \
        "every window summed; a component refused, or refused a window after its first, left out"
