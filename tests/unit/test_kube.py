"""Retries and typed errors of the API adapter (sj_operator.kube.Kube), without a cluster.

`_call` is given plain callables that fail a set number of times with what the kubernetes client
raises (ApiException with a status and a JSON Status body, or a connection error) before succeeding;
`_send`'s requests go to a small HTTP server on 127.0.0.1 that answers as the API server would.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, TypeVar

import pytest
import urllib3
from aiohttp import web
from kubernetes import client
from kubernetes.client.rest import ApiException
from tenacity import stop_after_attempt

from sj_operator.kube import (
    API_THREADS,
    BACKGROUND_THREADS,
    DEEPEST_JSON,
    Conflict,
    EventRef,
    Forbidden,
    Gone,
    Invalid,
    Kube,
    KubeError,
    NameTaken,
    NotFound,
    _unread,
    decoded,
    in_background,
)
from sj_operator.names import owner_reference

T = TypeVar("T")

REASONS = {0: "", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 409: "Conflict",
           422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


def api_error(status: int, message: str = "", body: str | None = None) -> ApiException:
    """What the client raises for an HTTP error: the API server's Status object as the body."""
    exc = ApiException(status=status, reason=REASONS[status])
    exc.body = body if body is not None else json.dumps({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": REASONS[status].replace(" ", ""), "code": status,
    })
    return exc


class Flaky:
    """A blocking API call that raises the given errors, one per call, then returns `result`."""

    def __init__(self, *errors: BaseException, result: Any = "ok") -> None:
        self.errors = list(errors)
        self.result = result
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.threads: set[int] = set()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        self.threads.add(threading.get_ident())
        if self.errors:
            raise self.errors.pop(0)
        return self.result


class Always:
    """A blocking API call that always raises what `make` builds."""

    def __init__(self, make: Callable[[], BaseException]) -> None:
        self.make = make
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        raise self.make()


class Sleeps(list[float]):
    """Stands in for asyncio.sleep: records each wait instead of waiting."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def call(fn: Callable[..., Any], *args: Any, attempts: int = 8, sleeps: Sleeps | None = None, **kwargs: Any) -> Any:
    """Kube._call with the production wait policy, stopping after `attempts` calls, never sleeping."""
    kube = Kube(api=client.ApiClient(), stop=stop_after_attempt(attempts),
                sleep=sleeps if sleeps is not None else Sleeps())
    return asyncio.run(kube._call(fn, *args, **kwargs))


# ----------------------------------------------------------------------------- retried, then success

TRANSIENT: list[tuple[str, list[BaseException]]] = [
    ("503", [api_error(503), api_error(503)]),
    ("500", [api_error(500, "etcdserver: request timed out")]),
    ("502 then 504", [api_error(502), api_error(504)]),
    ("429", [api_error(429, "too many requests, please try again later"), api_error(429)]),
    ("status 0 (no HTTP response)", [api_error(0, body="")]),
    ("urllib3 protocol error", [urllib3.exceptions.ProtocolError("Connection aborted.",
                                                                 ConnectionResetError(104, "reset by peer"))]),
    ("urllib3 read timeout", [urllib3.exceptions.ReadTimeoutError(None, "/api", "Read timed out.")]),  # type: ignore[arg-type]
    ("connection refused", [ConnectionRefusedError(111, "Connection refused")]),
    ("connection reset", [ConnectionResetError(104, "Connection reset by peer")]),
    ("socket timeout", [TimeoutError("timed out")]),
    ("mixed", [ConnectionRefusedError(111, "Connection refused"), api_error(503)]),
]


@pytest.mark.parametrize("errors", [case[1] for case in TRANSIENT], ids=[case[0] for case in TRANSIENT])
def test_transient_errors_are_retried_until_success(errors: list[BaseException]) -> None:
    fn = Flaky(*errors, result={"metadata": {"name": "x"}})
    sleeps = Sleeps()
    assert call(fn, "ns", "x", propagation_policy="Background", sleeps=sleeps) == {"metadata": {"name": "x"}}
    assert len(fn.calls) == len(errors) + 1
    assert all(c == (("ns", "x"), {"propagation_policy": "Background"}) for c in fn.calls)
    assert len(sleeps) == len(errors)


def test_success_at_once_is_one_call() -> None:
    fn = Flaky(result=42)
    assert call(fn) == 42
    assert len(fn.calls) == 1


def test_the_blocking_call_runs_outside_the_event_loop_thread() -> None:
    fn = Flaky(api_error(503))
    call(fn)
    assert threading.get_ident() not in fn.threads


def test_retries_back_off_exponentially_with_jitter_up_to_a_cap() -> None:
    fn = Always(lambda: api_error(503))
    sleeps = Sleeps()
    with pytest.raises(KubeError):
        call(fn, attempts=9, sleeps=sleeps)
    bases = [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert len(sleeps) == len(bases)
    for waited, base in zip(sleeps, bases, strict=False):
        assert base <= waited <= min(base + 0.2, 5.0)


# ----------------------------------------------------------------------------- typed at once

TYPED: list[tuple[int, type[KubeError], str]] = [
    (404, NotFound, 'jobs.batch "demo-r1" not found'),
    (409, Conflict, ('Operation cannot be fulfilled on scavengerjobs.scavenger.dev "demo": the object has been '
                     "modified; please apply your changes to the latest version and try again")),
    (409, Conflict, 'jobs.batch "demo-r1" already exists'),
    (422, Invalid, 'Job.batch "demo-r1" is invalid: spec.template.spec.containers[0].image: Required value'),
    (403, Forbidden, 'pods "x" is forbidden: exceeded quota: small, requested: cpu=2, used: cpu=0, limited: cpu=1'),
]


@pytest.mark.parametrize(("status", "cls", "message"), TYPED, ids=[f"{s} {c.__name__}" for s, c, _ in TYPED])
def test_client_errors_are_typed_at_once(status: int, cls: type[KubeError], message: str) -> None:
    fn = Flaky(api_error(status, message))
    with pytest.raises(cls) as err:
        call(fn)
    assert len(fn.calls) == 1
    assert type(err.value) is cls
    assert (err.value.status, err.value.reason, err.value.message) == (status, REASONS[status], message)
    assert str(err.value) == f"{status} {REASONS[status]}: {message}"


@pytest.mark.parametrize("status", [400, 401])
def test_other_client_errors_are_plain_kube_errors_at_once(status: int) -> None:
    fn = Flaky(api_error(status, "denied"))
    with pytest.raises(KubeError) as err:
        call(fn)
    assert len(fn.calls) == 1
    assert type(err.value) is KubeError
    assert (err.value.status, err.value.message) == (status, "denied")


BODIES: list[tuple[str, str | None, str]] = [
    ("JSON Status", json.dumps({"kind": "Status", "message": "gone"}), "gone"),
    ("JSON without message", json.dumps({"kind": "Status"}), ""),
    ("not JSON", "404 page not found", "404 page not found"),
    ("JSON but not an object", json.dumps(["a"]), '["a"]'),
    ("empty", "", ""),
    ("no body", None, ""),
]


@pytest.mark.parametrize(("body", "message"), [case[1:] for case in BODIES], ids=[case[0] for case in BODIES])
def test_message_from_the_body(body: str | None, message: str) -> None:
    exc = ApiException(status=404, reason="Not Found")
    exc.body = body
    with pytest.raises(NotFound) as err:
        call(Flaky(exc))
    assert err.value.message == message
    assert str(err.value) == (f"404 Not Found: {message}" if message else "404 Not Found")


def test_a_client_error_after_transient_ones_is_typed() -> None:
    fn = Flaky(api_error(503), api_error(409, "already exists"))
    with pytest.raises(Conflict, match="already exists"):
        call(fn)
    assert len(fn.calls) == 2


def test_other_exceptions_pass_through_at_once() -> None:
    fn = Flaky(ValueError("Missing the required parameter `name`"))
    with pytest.raises(ValueError, match="required parameter"):
        call(fn)
    assert len(fn.calls) == 1


# ----------------------------------------------------------------------------- giving up


def test_persistent_503_gives_up_as_a_kube_error() -> None:
    fn = Always(lambda: api_error(503, "the server is currently unable to handle the request"))
    with pytest.raises(KubeError) as err:
        call(fn, attempts=4)
    assert type(err.value) is KubeError
    assert (err.value.status, err.value.message) == (503, "the server is currently unable to handle the request")
    assert fn.calls == 4


def test_persistent_connection_error_gives_up_as_a_kube_error() -> None:
    fn = Always(lambda: urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionRefusedError(111, "refused")))
    with pytest.raises(KubeError) as err:
        call(fn, attempts=4)
    assert type(err.value) is KubeError
    assert err.value.status == 0
    assert "Connection aborted" in str(err.value)
    assert fn.calls == 4


def test_default_stop_is_retry_for() -> None:
    assert Kube(api=client.ApiClient(), retry_for=12.5).stop.max_delay == 12.5


def test_retry_for_zero_tries_once() -> None:
    fn = Always(lambda: api_error(503))
    with pytest.raises(KubeError):
        asyncio.run(Kube(api=client.ApiClient(), retry_for=0.0, sleep=Sleeps())._call(fn))
    assert fn.calls == 1


def test_every_failed_attempt_is_reported_for_the_metrics() -> None:
    reported: list[tuple[str, int]] = []

    def read_namespaced_pod(*_: Any) -> str:
        if len(reported) < 2:
            raise ApiException(status=503 if not reported else 429, reason="busy")
        return "ok"

    kube = Kube(api=client.ApiClient(), stop=stop_after_attempt(5), sleep=Sleeps())
    kube.on_error = lambda operation, status: reported.append((operation, status))
    assert asyncio.run(kube._call(read_namespaced_pod)) == "ok"
    assert reported == [("read_namespaced_pod", 503), ("read_namespaced_pod", 429)]


def test_every_attempt_is_counted_by_operation_and_calls_run_on_the_clients_own_threads() -> None:
    """`on_request` feeds scavenger_api_requests_total: a call retried twice counts three attempts."""
    seen: list[str] = []
    kube = Kube(api=client.ApiClient(), stop=stop_after_attempt(5), sleep=Sleeps())
    kube.on_request = seen.append

    def create_namespaced_job(*args: Any) -> str:
        return flaky(*args)

    flaky = Flaky(api_error(503), api_error(429))
    assert asyncio.run(kube._call(create_namespaced_job)) == "ok"
    assert seen == ["create_namespaced_job"] * 3
    assert len(flaky.threads) >= 1 and threading.get_ident() not in flaky.threads
    assert kube._threads._max_workers == API_THREADS


def test_the_default_client_pools_one_connection_per_worker_thread() -> None:
    assert Kube().api.configuration.connection_pool_maxsize == API_THREADS + BACKGROUND_THREADS


def test_a_task_in_the_background_lane_calls_on_the_background_threads_and_only_it() -> None:
    """Events and steering's writes never queue in front of a launch on the main threads."""
    kube = Kube(api=client.ApiClient(), stop=stop_after_attempt(1), sleep=Sleeps())

    def thread_name() -> str:
        return threading.current_thread().name

    async def background() -> str:
        in_background()
        return await kube._call(thread_name)

    async def both() -> tuple[str, str, str]:
        lane = await asyncio.create_task(background())
        return lane, await kube._call(thread_name), await asyncio.create_task(kube._call(thread_name))

    lane, main, other_task = asyncio.run(both())
    assert lane.startswith("kube-background") and kube._background._max_workers == BACKGROUND_THREADS
    assert main.startswith("kube-api") and other_task.startswith("kube-api")


class Unread:
    """A client method called for a write whose body is not read: the raw response, drained and released."""

    def __init__(self, status: int = 201, message: str = "") -> None:
        self.kwargs: dict[str, Any] = {}
        self.status, self.message, self.released = status, message, False

    def create_namespaced_job(self, *args: Any, **kwargs: Any) -> Any:
        self.kwargs = kwargs
        if self.status >= 300:  # the client reads the body of a refusal even when told not to decode
            raise api_error(self.status, self.message)
        return self

    def drain_conn(self) -> None:
        pass

    def release_conn(self) -> None:
        self.released = True


def test_a_write_whose_body_is_not_read_is_not_decoded_and_gives_its_connection_back() -> None:
    fake = Unread()
    call(_unread(fake.create_namespaced_job), "ns", {})
    assert fake.kwargs == {"_preload_content": False} and fake.released
    assert _unread(fake.create_namespaced_job).__name__ == "create_namespaced_job"  # the metrics' label


def test_a_refused_write_whose_body_is_not_read_still_names_the_reason() -> None:
    fake = Unread(403, 'pods "x" is forbidden: exceeded quota: q')
    with pytest.raises(Forbidden, match="exceeded quota"):
        call(_unread(fake.create_namespaced_job), "ns", {})


def test_an_event_is_stamped_with_when_it_happened() -> None:
    """Events go out in the background, maybe seconds after the decision: they carry its time."""
    at = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
    with ApiServer() as server:
        asyncio.run(server.run(lambda kube: kube.event(
            namespace="ns", name="sj", uid="u", kind="ScavengerJob", api_version="scavenger.dev/v1alpha1",
            type_="Normal", reason="Launched", message="run sj-r1 launched", at=at)))
    body = server.requests[0].body
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-11-25T12:00:01Z"


def test_an_aggregated_event_is_made_with_its_count_and_updated_by_name_and_uid() -> None:
    """An aggregated Event is made with the count and times so far (its name and uid are what later writes name),
    then its count, last time and latest message are merge-patched with its uid, which the API server does not
    let a patch change: an Event gone, or another made under its name (a Conflict or Invalid answer), is False;
    a refused create is None."""
    first, last = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC), datetime(2026, 11, 25, 12, 5, tzinfo=UTC)

    async def use(kube: Kube) -> list[Any]:
        made = await kube.event(namespace="ns", name="sj", uid="u", kind="ScavengerJob", api_version="v",
                                type_="Normal", reason="Protected", message="level 1", at=last, first=first,
                                count=3, named=True)
        assert made is not None
        return [made, await kube.update_event("ns", made, count=5, last=last, message="level 2"),
                await kube.update_event("ns", EventRef("sj.gone", "u1"), count=6, last=last, message="level 1"),
                await kube.update_event("ns", EventRef("sj.theirs", "u2"), count=6, last=last, message="level 1"),
                await kube.event(namespace="ns", name="sj", uid="u", kind="ScavengerJob", api_version="v",
                                 type_="Normal", reason="Protected", message="refused", named=True),
                await kube.event(namespace="ns", name="sj", uid="u", kind="ScavengerJob", api_version="v",
                                 type_="Normal", reason="Launched", message="not read")]

    with ApiServer((201, {"metadata": {"name": "sj.1a2b", "uid": "e-1"}}), (200, {}), _status(404, "gone"),
                   _status(422, "field is immutable"), _status(403, "forbidden"),
                   (201, {"metadata": {"name": "sj.3c4d", "uid": "e-2"}})) as server:
        answers = asyncio.run(server.run(use))
    assert answers == [EventRef("sj.1a2b", "e-1"), True, False, False, None, None]
    made = server.requests[0].body
    assert (made["count"], made["firstTimestamp"], made["lastTimestamp"]) == (3, "2026-11-25T12:00:01Z",
                                                                              "2026-11-25T12:05:00Z")
    assert server.requests[1] == Request("PATCH", "/api/v1/namespaces/ns/events/sj.1a2b", {}, MERGE, "Bearer t0ken",
                                         {"metadata": {"uid": "e-1"}, "count": 5,
                                          "lastTimestamp": "2026-11-25T12:05:00Z", "message": "level 2"})


def test_an_event_create_retried_after_its_answer_was_lost_makes_no_second_event() -> None:
    """An Event is named before its first attempt (the SJ's name and a stamp, as client-go's recorder names one),
    so a create retried after an attempt that was stored but not answered (504) is refused as existing (409): the
    Event is recorded once. A named one is read back for its uid; each call names a new Event."""
    async def use(kube: Kube) -> list[Any]:
        kube.instance = "scavenger-operator-7fddb5cb85-4z2qv"
        return [await kube.event(namespace="ns", name="sj", uid="u", kind="ScavengerJob", api_version="v",
                                 type_="Normal", reason="Launched", message="run sj-r1 launched"),
                await kube.event(namespace="ns", name="sj", uid="u", kind="ScavengerJob", api_version="v",
                                 type_="Normal", reason="Protected", message="level 1", named=True),
                await kube.event(namespace="ns", name="s" * 253, uid="u", kind="ScavengerJob", api_version="v",
                                 type_="Normal", reason="Launched", message="long")]

    with ApiServer(_status(504, "the request timed out"), _status(409, "already exists"),
                   _status(504, "the request timed out"), _status(409, "already exists"),
                   (200, {"metadata": {"name": "x", "uid": "e-1"}}), (201, {})) as server:
        answers = asyncio.run(server.run(use, server.kube(attempts=3)))
    posts = [r for r in server.requests if r.method == "POST"]
    names = [r.body["metadata"]["name"] for r in posts]
    assert all("generateName" not in r.body["metadata"] for r in posts)
    assert {r.body["reportingInstance"] for r in posts} == {"scavenger-operator-7fddb5cb85-4z2qv"}, "which replica"
    assert names[0] == names[1] and names[2] == names[3] and len(set(names)) == 3
    assert all(re.fullmatch(r"sj\.[0-9a-f]+", n) for n in names[:4])
    assert len(names[4]) == 253 and names[4].startswith("s" * 200)
    assert server.requests[4] == Request("GET", f"/api/v1/namespaces/ns/events/{names[2]}", {}, "",
                                         "Bearer t0ken", None)
    assert answers == [None, EventRef("x", "e-1"), None]


# --- _send: the writes made for every SJ, on the loop -------------------------------------------------

@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    authorization: str
    body: Any


class ApiServer:
    """An HTTP server on 127.0.0.1 that records each request and answers with the next of ``answers``
    ((status, JSON body); then 200 with an object of resourceVersion "1"), for a Kube whose client points at it."""

    def __init__(self, *answers: tuple[int, Any]) -> None:
        self.answers = list(answers)
        self.requests: list[Request] = []
        self.port = 0

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.requests.append(Request(request.method, request.path, dict(request.query),
                                     request.headers.get("Content-Type", ""),
                                     request.headers.get("authorization", ""), json.loads(raw) if raw else None))
        status, body = self.answers.pop(0) if self.answers else (200, {"metadata": {"resourceVersion": "1"}})
        return web.json_response(body, status=status)

    def __enter__(self) -> ApiServer:
        # The port is held from here to __exit__ (each run serves on a copy of this socket), so no other
        # process can take it between a Kube made for it and the run that answers.
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        return self

    def __exit__(self, *_: object) -> None:
        self.socket.close()

    def kube(self, attempts: int = 5) -> Kube:
        configuration = client.Configuration(host=f"http://127.0.0.1:{self.port}")
        configuration.api_key = {"BearerToken": "Bearer t0ken"}
        return Kube(client.ApiClient(configuration), stop=stop_after_attempt(attempts), sleep=Sleeps())

    async def run(self, use: Callable[[Kube], Any], kube: Kube | None = None) -> Any:
        """``use(kube)`` while the server answers; the Kube's sessions closed after it."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.SockSite(runner, self.socket.dup()).start()
        kube = kube or self.kube()
        try:
            return await use(kube)
        finally:
            await kube.close()
            await runner.cleanup()


def test_a_list_is_answered_while_more_watches_than_before_hold_their_connections() -> None:
    """Each watch cache holds one connection open for its watch; a sixth cache's list still goes out (the
    session once had room for four, and the fifth cache never listed)."""
    opened: list[str] = []
    release = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        if "watch" not in request.query:
            return web.json_response({"kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": []})
        response = web.StreamResponse()
        await response.prepare(request)
        opened.append(request.path)
        await release.wait()
        return response

    async def use(port: int) -> tuple[list[dict[str, Any]], str]:
        configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
        kube = Kube(client.ApiClient(configuration), stop=stop_after_attempt(1), sleep=Sleeps())

        async def watch(path: str) -> None:
            async for _ in kube.watch_raw(path, "1"):
                pass

        watches = [asyncio.create_task(watch(f"/api/v1/kind{i}")) for i in range(5)]
        async def all_open() -> None:
            while len(opened) < len(watches):
                await asyncio.sleep(0.01)

        try:
            await asyncio.wait_for(all_open(), 5)
            return await asyncio.wait_for(kube.list_raw("/api/v1/pods"), 5)
        finally:
            release.set()
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            await kube.close()

    assert asyncio.run(_serving(handle, use)) == ([], "7")


async def _serving(handle: Callable[[web.Request], Awaitable[web.StreamResponse]],
                   use: Callable[[int], Awaitable[T]]) -> T:
    """``use(port)`` while ``handle`` answers every GET on that port."""
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        return await use(runner.addresses[0][1])
    finally:
        await runner.cleanup()


def _status(status: int, message: str) -> tuple[int, dict[str, Any]]:
    return status, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": status}


JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "sj-r1", "namespace": "ns"}, "spec": {}}
SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "sj-r1", "namespace": "ns"}, "spec": {}}
DELETE_J = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "j"},
            "propagationPolicy": "Background"}
"""A delete of the object of uid ``j`` only: whoever made one of its name since keeps it."""
OURS = {"metadata": {"name": "sj-r1", "namespace": "ns", "uid": "j", "resourceVersion": "5",
                     "ownerReferences": [owner_reference("sj", "u-sj")]}}
THEIRS = {"metadata": {"name": "sj-r1", "namespace": "ns", "uid": "t", "labels": {"scavenger.dev/job-name": "sj"}}}
MERGE = "application/merge-patch+json"


@pytest.mark.parametrize(("use", "method", "path", "query", "content_type", "body"), [
    pytest.param(lambda k: k.create_child(JOB, "u-sj"), "POST", "/apis/batch/v1/namespaces/ns/jobs", {},
                 "application/json", JOB, id="create-job"),
    pytest.param(lambda k: k.delete_child("Job", "ns", "sj-r1", "j"), "DELETE",
                 "/apis/batch/v1/namespaces/ns/jobs/sj-r1", {}, "application/json", DELETE_J, id="delete-job"),
    pytest.param(lambda k: k.create_child(SERVICE, "u-sj"), "POST", "/api/v1/namespaces/ns/services", {},
                 "application/json", SERVICE, id="create-service"),
    pytest.param(lambda k: k.delete_child("Service", "ns", "sj-r1", "j"), "DELETE",
                 "/api/v1/namespaces/ns/services/sj-r1", {}, "application/json", DELETE_J, id="delete-service"),
    pytest.param(lambda k: k.read_child("Secret", "ns", "sj-mpi-ssh"), "GET",
                 "/api/v1/namespaces/ns/secrets/sj-mpi-ssh", {}, "", None, id="read-secret"),
    pytest.param(lambda k: k.patch_child("ConfigMap", "ns", "sj-mpi-hostfile", {"data": {"hostfile": "h"}}, "8"),
                 "PATCH", "/api/v1/namespaces/ns/configmaps/sj-mpi-hostfile", {}, MERGE,
                 {"data": {"hostfile": "h"}, "metadata": {"resourceVersion": "8"}}, id="patch-config-map"),
    pytest.param(lambda k: k.create_child({**JOB, "kind": "PodDisruptionBudget"}, "u-sj"), "POST",
                 "/apis/policy/v1/namespaces/ns/poddisruptionbudgets", {}, "application/json",
                 {**JOB, "kind": "PodDisruptionBudget"}, id="create-budget"),
    pytest.param(lambda k: k.patch_sj_status("ns", "sj", {"phase": "Running"}, "42"), "PATCH",
                 "/apis/scavenger.dev/v1alpha1/namespaces/ns/scavengerjobs/sj/status", {}, MERGE,
                 {"status": {"phase": "Running"}, "metadata": {"resourceVersion": "42"}}, id="patch-status"),
    pytest.param(lambda k: k.label_pod("ns", "p", {"a": "true", "b": None}), "PATCH", "/api/v1/namespaces/ns/pods/p",
                 {}, MERGE, {"metadata": {"labels": {"a": "true", "b": None}}}, id="label-pod"),
    pytest.param(lambda k: k.dry_run_pod({"metadata": {"namespace": "ns"}, "spec": {}}), "POST",
                 "/api/v1/namespaces/ns/pods", {"dryRun": "All"}, "application/json",
                 {"metadata": {"namespace": "ns"}, "spec": {}}, id="dry-run-pod"),
])
def test_each_send_goes_to_its_path_with_the_clients_credentials_and_its_body(
        use: Callable[[Kube], Any], method: str, path: str, query: dict[str, str], content_type: str,
        body: Any) -> None:
    with ApiServer() as server:
        asyncio.run(server.run(use))
    assert server.requests == [Request(method, path, query, content_type, "Bearer t0ken", body)]


def test_what_is_read_is_the_decoded_answer() -> None:
    patched = {"metadata": {"resourceVersion": "43"}, "status": {"phase": "Running"}}
    async def use(kube: Kube) -> list[Any]:
        return [await kube.patch_sj_status("ns", "sj", {"phase": "Running"}, None)]

    with ApiServer((200, patched)) as server:
        answers = asyncio.run(server.run(use))
    assert answers == [patched]


def test_dates_and_read_only_mappings_in_a_body_go_as_json_has_them() -> None:
    at = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
    selector = MappingProxyType({"pool": "burst"})
    with ApiServer() as server:
        asyncio.run(server.run(lambda k: k.patch_sj_status("ns", "sj", {"launchedTimestamp": at, "s": selector},
                                                           None)))
    assert server.requests[0].body == {"status": {"launchedTimestamp": "2026-11-25T12:00:01+00:00",
                                                  "s": {"pool": "burst"}}}


@pytest.mark.parametrize(("answer", "cls"), [
    (_status(409, 'jobs.batch "sj-r1" already exists'), Conflict),
    (_status(422, 'Job.batch "sj-r1" is invalid: spec.template: Required value'), Invalid),
    (_status(403, 'pods "x" is forbidden: exceeded quota: q'), Forbidden),
    (_status(404, 'namespaces "ns" not found'), NotFound),
    (_status(400, "the body is not JSON"), KubeError),
])
def test_a_refused_send_is_typed_at_once_with_the_servers_message(answer: tuple[int, Any],
                                                                   cls: type[KubeError]) -> None:
    errors: list[tuple[str, int]] = []

    async def use(kube: Kube) -> None:
        kube.on_error = lambda operation, status: errors.append((operation, status))
        await kube.patch_child("Job", "ns", "sj-r1", {"spec": {}}, "5")

    with ApiServer(answer) as server, pytest.raises(cls) as info:
        asyncio.run(server.run(use))
    assert type(info.value) is cls and info.value.status == answer[0]
    assert info.value.message == answer[1]["message"]
    assert len(server.requests) == 1 and errors == [("patch_namespaced_job", answer[0])]


def test_an_existing_run_the_sj_controls_is_kept_as_stored() -> None:
    with ApiServer(_status(409, "already exists"), (200, OURS)) as server:
        found = asyncio.run(server.run(lambda k: k.create_child(JOB, "u-sj")))
    assert found == {**OURS, "kind": "Job"}
    assert [(r.method, r.path) for r in server.requests] == [("POST", "/apis/batch/v1/namespaces/ns/jobs"),
                                                             ("GET", "/apis/batch/v1/namespaces/ns/jobs/sj-r1")]


@pytest.mark.parametrize("existing", [THEIRS, {"metadata": {**OURS["metadata"], "ownerReferences": [
    owner_reference("sj", "u-an-earlier-sj-of-that-name")]}}], ids=["a-users", "another-sjs"])
def test_an_existing_object_of_a_childs_name_the_sj_does_not_control_is_a_name_taken(existing: Any) -> None:
    with ApiServer(_status(409, "already exists"), (200, existing)) as server, pytest.raises(NameTaken) as info:
        asyncio.run(server.run(lambda k: k.create_child(JOB, "u-sj")))
    assert (info.value.kind, info.value.namespace, info.value.name) == ("Job", "ns", "sj-r1")
    assert info.value.message.startswith("Job ns/sj-r1 exists and is not this SJ's")
    assert len(server.requests) == 2, "read, never written"


BUDGET = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "sj-r1", "namespace": "ns"},
          "spec": {"minAvailable": 1}}
BUDGETS = "/apis/policy/v1/namespaces/ns/poddisruptionbudgets"


def _at(version: str) -> tuple[int, Any]:
    return 200, {"metadata": {"resourceVersion": version}}


@pytest.mark.parametrize(("answers", "version", "same", "requests", "after"), [
    pytest.param([_at("7")], None, None, [("POST", BUDGETS, BUDGET)], "7", id="made"),
    pytest.param([_status(409, "already exists"), (200, OURS)], None, lambda stored: stored["metadata"]["uid"] == "j",
                 [("POST", BUDGETS, BUDGET), ("GET", f"{BUDGETS}/sj-r1", None)], "5", id="ours-as-it-should-be"),
    pytest.param([_status(409, "already exists"), (200, OURS), _at("6")], None,
                 lambda stored: stored["metadata"]["uid"] != "j",
                 [("POST", BUDGETS, BUDGET), ("GET", f"{BUDGETS}/sj-r1", None),
                  ("PATCH", f"{BUDGETS}/sj-r1", {"spec": {"minAvailable": 1}, "metadata": {"resourceVersion": "5"}})],
                 "6", id="ours-patched-as-read"),
    pytest.param([_at("9")], "8", None,
                 [("PATCH", f"{BUDGETS}/sj-r1", {"spec": {"minAvailable": 1}, "metadata": {"resourceVersion": "8"}})],
                 "9", id="patched-at-the-version-written"),
])
def test_an_applied_child_is_made_or_patched_at_the_version_read_or_written(
        answers: list[tuple[int, Any]], version: str | None, same: Any, requests: list[tuple[str, str, Any]],
        after: str) -> None:
    with ApiServer(*answers) as server:
        stored = asyncio.run(server.run(lambda k: k.apply_child(BUDGET, "u-sj", {"spec": BUDGET["spec"]},
                                                                version=version, same=same)))
    assert stored == after
    assert [(r.method, r.path, r.body) for r in server.requests] == requests


@pytest.mark.parametrize(("answers", "version", "error", "methods"), [
    pytest.param([_status(409, "already exists"), (200, THEIRS)], None, NameTaken, ["POST", "GET"], id="theirs"),
    pytest.param([_status(409, "already exists"), (200, OURS), _status(409, "the object has been modified")], None,
                 Conflict, ["POST", "GET", "PATCH"], id="changed-since-read"),
    pytest.param([_status(409, "the object has been modified")], "8", Conflict, ["PATCH"],
                 id="changed-since-written"),
    pytest.param([_status(404, "not found")], "8", NotFound, ["PATCH"], id="gone-since-written"),
    pytest.param([(200, {"metadata": {}})], None, KubeError, ["POST"], id="no-version-answered"),
])
def test_an_applied_child_is_never_patched_unless_ours_as_read_or_written(
        answers: list[tuple[int, Any]], version: str | None, error: type[KubeError], methods: list[str]) -> None:
    with ApiServer(*answers) as server, pytest.raises(error):
        asyncio.run(server.run(lambda k: k.apply_child(BUDGET, "u-sj", {"spec": {}}, version=version)))
    assert [r.method for r in server.requests] == methods


def test_a_child_that_existed_and_is_gone_by_the_read_is_tried_again_later() -> None:
    with ApiServer(_status(409, "already exists"), _status(404, "not found")) as server, pytest.raises(Conflict):
        asyncio.run(server.run(lambda k: k.create_child(JOB, "u-sj")))


def test_a_missing_object_or_another_of_its_name_is_not_an_error_to_delete() -> None:
    with ApiServer(_status(404, "not found"), _status(409, "Precondition failed: UID in precondition: j")) as server:
        deleted = asyncio.run(server.run(lambda k: asyncio.gather(k.delete_child("Job", "ns", "sj-r1", "j"),
                                                                  k.delete_child("Service", "ns", "sj-r1", "j"))))
    assert deleted == [False, False] and len(server.requests) == 2


@pytest.mark.parametrize(("stored", "requests", "deleted"), [
    (OURS, [("GET", None), ("DELETE", DELETE_J)], True),
    (THEIRS, [("GET", None)], False),
    (None, [("GET", None)], False),
], ids=["its-own", "someone-elses", "none"])
def test_an_sjs_object_is_deleted_only_when_it_controls_it_and_only_that_very_one(stored: Any, requests: Any,
                                                                                   deleted: bool) -> None:
    with ApiServer((200, stored) if stored is not None else _status(404, "not found")) as server:
        answer = asyncio.run(server.run(lambda k: k.delete_owned("Service", "ns", "sj-r1", "u-sj")))
    assert answer is deleted
    assert [(r.method, r.body) for r in server.requests] == requests


def test_a_send_answered_429_or_5xx_is_retried_with_backoff_until_it_succeeds() -> None:
    calls: list[str] = []
    errors: list[tuple[str, int]] = []
    with ApiServer(_status(503, "unavailable"), _status(429, "slow down"), _status(500, "etcd timeout"),
                   (201, JOB)) as server:
        kube = server.kube()
        kube.on_request, kube.on_error = calls.append, lambda operation, status: errors.append((operation, status))
        asyncio.run(server.run(lambda k: k.create_child(JOB, "u-sj"), kube))
    assert len(server.requests) == 4 and calls == ["create_namespaced_job"] * 4
    assert [status for _, status in errors] == [503, 429, 500]
    assert len(kube.sleep) == 3 and kube.sleep == sorted(kube.sleep)  # type: ignore[arg-type]


@pytest.mark.parametrize(("answer", "cls", "message"), [
    (_status(403, 'pods is forbidden: User "sa" cannot list resource "pods"'), Forbidden,
     'pods is forbidden: User "sa" cannot list resource "pods"'),
    (_status(410, "too old resource version: 7 (9)"), Gone, "too old resource version: 7 (9)"),
    ((500, "etcd is down"), KubeError, '"etcd is down"'),
])
def test_a_refused_list_is_typed_with_the_servers_message_or_its_body(answer: tuple[int, Any],
                                                                       cls: type[KubeError], message: str) -> None:
    errors: list[tuple[str, int]] = []

    async def use(kube: Kube) -> None:
        kube.on_error = lambda operation, status: errors.append((operation, status))
        await kube.list_raw("/api/v1/pods")

    with ApiServer(answer) as server, pytest.raises(cls) as info:
        asyncio.run(server.run(use))
    assert type(info.value) is cls and (info.value.status, info.value.message) == (answer[0], message)
    assert errors == [("list_raw", answer[0])]


def test_a_send_refused_with_5xx_until_the_retries_run_out_is_a_kube_error_with_its_status() -> None:
    with ApiServer(*[_status(503, "unavailable")] * 3) as server, pytest.raises(KubeError) as info:
        asyncio.run(server.run(lambda k: k.create_child(JOB, "u-sj"), server.kube(attempts=3)))
    assert (info.value.status, info.value.message, len(server.requests)) == (503, "unavailable", 3)


def test_a_send_with_no_server_is_retried_then_a_kube_error_with_status_0() -> None:
    errors: list[int] = []
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kube = Kube(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}")),
                stop=stop_after_attempt(3), sleep=Sleeps())
    kube.on_error = lambda operation, status: errors.append(status)

    async def use() -> None:
        try:
            await kube.create_child(JOB, "u-sj")
        finally:
            await kube.close()

    with pytest.raises(KubeError) as info:
        asyncio.run(use())
    assert info.value.status == 0 and errors == [0, 0, 0]


def test_each_lane_sends_on_connections_of_its_own() -> None:
    async def use(kube: Kube) -> tuple[Any, Any, int, int]:
        async def background() -> Any:
            in_background()
            await kube.create_child(JOB, "u-sj")
            return kube._sender()

        foreground = kube._sender()
        await kube.create_child(JOB, "u-sj")
        other = await asyncio.create_task(background())
        return foreground, other, foreground.connector.limit, other.connector.limit

    with ApiServer() as server:
        foreground, background, limit, background_limit = asyncio.run(server.run(use))
    assert foreground is not background and (limit, background_limit) == (API_THREADS, BACKGROUND_THREADS)
    assert len(server.requests) == 2


# --- the raw list and watch's credentials -------------------------------------------------------------

def _configured(**settings: Any) -> Kube:
    configuration = client.Configuration(host="https://api.example:6443")
    for name, value in settings.items():
        setattr(configuration, name, value)
    return Kube(client.ApiClient(configuration))


@pytest.mark.parametrize(("settings", "expected"), [
    # What load_kube_config and load_incluster_config leave for a token (the prefix is in the value).
    ({"api_key": {"BearerToken": "Bearer abc"}}, {"authorization": "Bearer abc"}),
    # A token kept apart from its prefix.
    ({"api_key": {"BearerToken": "abc"}, "api_key_prefix": {"BearerToken": "Bearer"}},
     {"authorization": "Bearer abc"}),
    # Client certificates (the local cluster's kubeconfig): no header.
    ({"cert_file": "/nonexistent.crt", "key_file": "/nonexistent.key"}, {}),
])
def test_the_raw_requests_carry_the_clients_credentials(settings: dict[str, Any], expected: dict[str, str]) -> None:
    headers = _configured(**settings)._headers()
    assert {k: v for k, v in headers.items() if k != "Accept"} == expected


def test_a_rotated_token_is_read_again_for_each_request() -> None:
    tokens = iter(["Bearer one", "Bearer two"])

    def refresh(configuration: client.Configuration) -> None:
        configuration.api_key["BearerToken"] = next(tokens)

    kube = _configured(api_key={"BearerToken": "Bearer zero"}, refresh_api_key_hook=refresh)
    assert [kube._headers()["authorization"] for _ in range(2)] == ["Bearer one", "Bearer two"]


def _nested(depth: int) -> str:
    return '{"a":' * depth + "{}" + "}" * depth


@pytest.mark.parametrize("depth", [10, 2_000, DEEPEST_JSON - 10])
def test_a_document_nested_as_deep_as_the_api_server_stores_is_decoded(depth: int) -> None:
    value = asyncio.run(decoded(_nested(depth)))
    for _ in range(depth):
        value = value["a"]
    assert value == {}
    with pytest.raises(ValueError):
        asyncio.run(decoded(_nested(depth)[:-1]))
    with pytest.raises(ValueError):
        asyncio.run(decoded(_nested(DEEPEST_JSON * 4)))


@pytest.mark.parametrize(("document", "value"), [
    ('{"n": 18446744073709551616}', {"n": 2**64}),                # beyond 64 bits: orjson refuses it
    ('{"n": 18446744073709551617}', {"n": 2**64 + 1}),            # or reads it as a float
    ('{"n": -9223372036854775809}', {"n": -(2**63) - 1}),
    ('{"n": 100000000000000000000000}', {"n": 10**23}),
    ('{"n": 9223372036854775807}', {"n": 2**63 - 1}),
    ('{"s": "1234567890123456789012"}', {"s": "1234567890123456789012"}),
    ('{"s": "\\ud800"}', {"s": "\ud800"}),                         # a lone surrogate, escaped
    ('{"f": 1e400}', {"f": float("inf")}),                         # beyond a double: Python's reads infinity
    ('{"a": 1, "a": 2}', {"a": 2}),                                # a key twice: the last, as the API server's
    ('{"n": 7, "s": "ok"}', {"n": 7, "s": "ok"}),                  # and what orjson reads, as Python's would
])
def test_what_the_api_server_stores_and_orjson_refuses_is_decoded_as_pythons_decoder_does(document: str,
                                                                                         value: object) -> None:
    from sj_operator.kube import loads

    assert loads(document) == value == json.loads(document)
    assert loads(document.encode()) == value
    assert [type(v) for v in loads(document).values()] == [type(v) for v in value.values()]  # type: ignore[attr-defined]
    assert asyncio.run(decoded(document)) == value


@pytest.mark.parametrize("document", ["", "{", '{"a": }', "nan", "\xff"])
def test_what_no_decoder_reads_is_a_value_error(document: str) -> None:
    from sj_operator.kube import loads

    with pytest.raises(ValueError):
        loads(document)


def test_a_tenants_deeply_nested_object_neither_ends_a_watch_nor_stops_a_list() -> None:
    """Python's decoder gives up at about 1,000 levels with a RecursionError; the API server keeps objects
    nested up to 10,000 deep in free-form fields. The cache's list and watch take such an object like any."""
    deep = '{"metadata":{"name":"deep","resourceVersion":"5","managedFields":[{"fieldsV1":' + _nested(5_000) + "}]}}"
    plain = '{"metadata":{"name":"plain","resourceVersion":"6"}}'

    async def handle(request: web.Request) -> web.StreamResponse:
        if "watch" not in request.query:
            return web.Response(text='{"metadata":{"resourceVersion":"4"},"items":[' + deep + "]}",
                                content_type="application/json")
        response = web.StreamResponse()
        await response.prepare(request)
        for obj in (deep, plain):
            await response.write(b'{"type":"MODIFIED","object":' + obj.encode() + b"}\n")
        return response

    async def use(port: int) -> tuple[list[str], list[str]]:
        kube = Kube(client.ApiClient(client.Configuration(host=f"http://127.0.0.1:{port}")),
                    stop=stop_after_attempt(1), sleep=Sleeps())
        try:
            listed, _ = await kube.list_raw("/api/v1/pods")
            watched = [obj["metadata"]["name"] async for _, obj in kube.watch_raw("/api/v1/pods", "4")]
            return [obj["metadata"]["name"] for obj in listed], watched
        finally:
            await kube.close()

    assert asyncio.run(_serving(handle, use)) == (["deep"], ["deep", "plain"])
