"""Where the control plane's CPU goes while a run goes on: the API server's and the controller manager's own
CPU profiles (Go's ``/debug/pprof/profile``), taken back to back from a run's first create until its units run,
and summed by what spent it: the controller manager's controller (``endpointslice``, ``job``, ...), the API
server's kind of request (``create``, ``watch``, ...), either's Go garbage collector. `CpuAccount` says how much
each process took; this says for what, which no metric of theirs tells (`bench_scale.py --profile-control-plane`).

A profile is gzipped ``profile.proto`` (github.com/google/pprof); `decode` reads the little of it used here
(samples, their stacks, the functions' names) straight from the protobuf wire format. Go's profiler samples
100 times a second and costs the profiled process a few percent.
"""
from __future__ import annotations

import gzip
import ssl
import threading
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from kubernetes import client

from benchmarks.harness.kube import apiserver_get
from benchmarks.harness.processes import command_line
from benchmarks.harness.progress import log

__all__ = ["APISERVER_PARTS", "WINDOW", "ControlPlaneProfiles", "Sample", "apiserver_part", "by_component",
           "cluster_takers", "controller_part", "decode", "parts", "secure_port"]

WINDOW = 10
"""Seconds of one profile; the next is asked for as soon as it is in."""
CONTROLLERS = "k8s.io/kubernetes/pkg/controller/"
GO_GC = ("runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge")
"""The Go runtime's own collector goroutines (a request's allocation assists stay the request's)."""
NESTED_CONTROLLERS = ("volume", "certificates")
"""Controller packages whose subpackages are controllers of their own (``volume/attachdetach``, ...)."""
APISERVER_PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("watch", ("handlers.serveWatch", "(*WatchServer).HandleHTTP", "(*watchEncoder)")),
    ("create", ("handlers.CreateResource", "handlers.CreateNamedResource")),
    ("update", ("handlers.UpdateResource",)),
    ("patch", ("handlers.PatchResource", "handlers.(*patcher)")),
    ("delete", ("handlers.DeleteResource", "handlers.DeleteCollection")),
    ("get and list", ("handlers.GetResource", "handlers.ListResource", "handlers.getResourceHandler")),
    ("watch cache", ("cacher.(*Cacher).dispatch", "cacher.(*Cacher).processEvent", "cacher.(*cacheWatcher)",
                     "cacher.(*watchCache)", "cacher.(*Cacher).startCaching")),
    ("etcd", ("k8s.io/apiserver/pkg/storage/etcd3.(*watchChan)", "go.etcd.io/etcd/client/", "google.golang.org/grpc")),
    ("HTTP, TLS and filters", ("net/http.", "golang.org/x/net/http2.", "crypto/tls.")),
    ("Go GC", GO_GC),
)
"""The API server's parts, the first whose markers a stack holds (any frame) naming it: a watch is served by
``ListResource`` too, so watches are looked for first; a request's own work (its storage's included) before the
watch cache's, which is the events' dispatch to the watchers (a watch's setup and first events are its list's);
its client of etcd, the watches of etcd's changes decoded; the connections' own work (HTTP/2 framing, TLS: of the
watches' streams too) and the filters before a handler (authentication, authorization, priority and fairness)."""


@dataclass(frozen=True)
class Sample:
    """One stack of a profile, leaf first (inlined functions before their callers), and its CPU seconds."""

    stack: tuple[str, ...]
    seconds: float


# --- the wire format ---------------------------------------------------------------------------------------------

def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("not a profile: it ends inside a number")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7


def _signed(n: int) -> int:
    """An int64 read as its varint (two's complement in 64 bits)."""
    return n - (1 << 64) if n >= 1 << 63 else n


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """A message's fields as (number, value): varints as ints, length-delimited ones as bytes (fixed-width ones,
    which profile.proto does not use, are skipped)."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
        elif wire == 2:
            size, at = _varint(data, at)
            yield number, data[at:at + size]
            at += size
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:
            raise ValueError(f"not a profile: wire type {wire} at byte {at}")


def _ints(value: int | bytes) -> list[int]:
    """A repeated integer field's value: one varint, or a packed run of them."""
    if isinstance(value, int):
        return [value]
    out, at = [], 0
    while at < len(value):
        n, at = _varint(value, at)
        out.append(n)
    return out


def _message(value: int | bytes) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError("not a profile: a message field holds a number")
    return value


def _int(data: bytes, number: int) -> int:
    """A message's integer field ``number`` (0 when absent, as protobuf has it)."""
    return next((v for n, v in _fields(data) if n == number and isinstance(v, int)), 0)


def _location(data: bytes) -> tuple[int, list[int]]:
    """A Location: its id and its lines' functions (inlined ones first; none when it was not symbolized)."""
    lines = [_int(_message(v), 1) for n, v in _fields(data) if n == 4]
    return _int(data, 1), lines


def _sample(data: bytes) -> tuple[list[int], list[int]]:
    """A Sample: its locations (leaf first) and its values."""
    ids: list[int] = []
    values: list[int] = []
    for n, v in _fields(data):
        if n == 1:
            ids += _ints(v)
        elif n == 2:
            values += [_signed(i) for i in _ints(v)]
    return ids, values


def decode(data: bytes) -> list[Sample]:
    """The samples of a CPU profile (gzipped or not), with the seconds of its ``cpu`` value."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    strings: list[str] = []
    types: list[int] = []
    functions: dict[int, int] = {}
    locations: dict[int, list[int]] = {}
    samples: list[tuple[list[int], list[int]]] = []
    for number, value in _fields(data):
        if number == 1:  # sample_type: a ValueType, its type a string's index
            types.append(_int(_message(value), 1))
        elif number == 2:
            samples.append(_sample(_message(value)))
        elif number == 4:
            ident, lines = _location(_message(value))
            locations[ident] = lines
        elif number == 5:  # a Function: its id and its name's index
            functions[_int(_message(value), 1)] = _int(_message(value), 2)
        elif number == 6:
            strings.append(_message(value).decode())
    cpu = next((i for i, t in enumerate(types) if strings[t] == "cpu"), None)
    if cpu is None:
        raise ValueError("not a CPU profile: no sample type named cpu")
    def frames(location: int) -> list[str]:
        return [strings[functions.get(f, 0)] for f in locations.get(location, ())] or [f"?location {location}"]

    return [Sample(tuple(frame for loc in ids for frame in frames(loc)), values[cpu] / 1e9) for ids, values in samples]


# --- what spent it -------------------------------------------------------------------------------------------------

def controller_part(stack: Sequence[str]) -> str:
    """The controller manager's part a stack (leaf first) is: the controller whose code is nearest its root
    (``k8s.io/kubernetes/pkg/controller/<name>``, ``volume/<name>``: its workers, and its handlers of the
    informers' events); Go's garbage collector; ``informers`` (client-go's caches, and the watches' events decoded);
    ``other``."""
    for frame in reversed(stack):
        if frame.startswith(CONTROLLERS):
            path = frame[len(CONTROLLERS):].split(".", 1)[0].split("/")
            name = "/".join(path[:2]) if path[0] in NESTED_CONTROLLERS and len(path) > 1 else path[0]
            if name:
                return name
    if any(frame.startswith(GO_GC) for frame in stack):
        return "Go GC"
    if any(frame.startswith(("k8s.io/client-go/tools/cache.", "k8s.io/apimachinery/pkg/watch.")) for frame in stack):
        return "informers"
    return "other"


def apiserver_part(stack: Sequence[str]) -> str:
    """The API server's part a stack (leaf first) is (`APISERVER_PARTS`; ``other`` when none)."""
    for name, markers in APISERVER_PARTS:
        if any(marker in frame for frame in stack for marker in markers):
            return name
    return "other"


def parts(samples: Sequence[Sample], part: Callable[[Sequence[str]], str]) -> dict[str, float]:
    """The samples' seconds by ``part``, the most first."""
    out: dict[str, float] = {}
    for sample in samples:
        name = part(sample.stack)
        out[name] = out.get(name, 0.0) + sample.seconds
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


# --- taking them ---------------------------------------------------------------------------------------------------

def secure_port(cmdline: str) -> int | None:
    """The ``--secure-port`` a component's command line gives (the last one, as its flags parse); None without."""
    ports = [arg.split("=", 1)[1] for arg in cmdline.split() if arg.startswith("--secure-port=")]
    return int(ports[-1]) if ports and ports[-1].isdigit() else None


def _component_port(pattern: str) -> int | None:
    found = command_line(pattern)
    return None if found is None else secure_port(found[1])


def _apiserver_profile(api: client.ApiClient) -> Callable[[int], bytes]:
    def take(seconds: int) -> bytes:
        return apiserver_get(api, "/debug/pprof/profile", query=[("seconds", seconds)], timeout=seconds + 60)
    return take


def _controller_manager_profile(port: int) -> Callable[[int], bytes]:
    # Its serving certificate is its own, self-signed, on loopback: nothing to verify it against.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE

    def take(seconds: int) -> bytes:
        url = f"https://127.0.0.1:{port}/debug/pprof/profile?seconds={seconds}"
        with urllib.request.urlopen(url, timeout=seconds + 60, context=context) as response:
            return bytes(response.read())
    return take


Taker = tuple[Callable[[int], bytes], Callable[[Sequence[str]], str]]
"""How a component's profile is taken (for so many seconds) and what part of it a stack is."""


def cluster_takers(api: client.ApiClient) -> dict[str, Taker]:
    """The local cluster's API server (through ``api``) and controller manager (on loopback, at its secure port)."""
    takers: dict[str, Taker] = {"kube-apiserver": (_apiserver_profile(api), apiserver_part)}
    if (port := _component_port("bin/kube-controller-manager ")) is not None:
        takers["kube-controller-manager"] = (_controller_manager_profile(port), controller_part)
    else:
        log("  no controller manager with a --secure-port here: its CPU is not profiled")
    return takers


class ControlPlaneProfiles:
    """Components' CPU by part (`apiserver_part`, `controller_part`) from the moment this is made until `seconds`:
    a thread per component (``takers``, `cluster_takers`) takes ``window``-second profiles one after another (the
    next asked for as soon as one is in). A component any of whose windows cannot be taken (the controller manager
    without its ``/debug/pprof`` allowed, as ``hack/cluster`` allows it; a request timed out) is said once and left
    out: its figures would miss that window."""

    def __init__(self, takers: Mapping[str, Taker], window: int = WINDOW) -> None:
        self.window = window
        self._stop = threading.Event()
        self._taken: dict[str, tuple[list[bytes], Callable[[Sequence[str]], str]]] = {}
        self._threads = [threading.Thread(target=self._profile, args=(name, *taker), daemon=True, name=f"pprof {name}")
                         for name, taker in takers.items()]
        for thread in self._threads:
            thread.start()

    def _profile(self, name: str, take: Callable[[int], bytes], part: Callable[[Sequence[str]], str]) -> None:
        taken: list[bytes] = []
        while not self._stop.is_set():
            try:
                taken.append(take(self.window))
            except Exception as exc:  # a window not taken: the component's figures would miss it
                log(f"  {name}'s CPU profile not taken ({type(exc).__name__}: {exc}); it is left out")
                return
        self._taken[name] = (taken, part)

    def seconds(self) -> dict[str, float]:
        """Stops (after the windows under way: the figures cover at most ``window`` seconds more than asked) and
        gives the CPU seconds by component and part (``kube-controller-manager endpointslice``), each component's
        the most first. The profiles are read only now, so that reading them took nothing from the run."""
        self._stop.set()
        for thread in self._threads:
            thread.join(self.window + 90)
        out: dict[str, float] = {}
        for name, (taken, part) in dict(self._taken).items():
            sums = parts([sample for data in taken for sample in decode(data)], part)
            out.update({f"{name} {key}": s for key, s in sums.items()})
        return out


def by_component(seconds: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """`ControlPlaneProfiles.seconds`' figures by component again."""
    out: dict[str, dict[str, float]] = {}
    for key, s in seconds.items():
        name, _, part = key.partition(" ")
        out.setdefault(name, {})[part] = s
    return out
