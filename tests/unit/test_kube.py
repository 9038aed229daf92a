"""Retries and typed errors of the API adapter (sj_operator.kube.Kube._call), without a cluster.

`_call` is given plain callables that fail a set number of times with what the kubernetes client
raises (ApiException with a status and a JSON Status body, or a connection error) before succeeding.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException
from tenacity import stop_after_attempt

from sj_operator.kube import (
    API_THREADS,
    BACKGROUND_THREADS,
    Conflict,
    Forbidden,
    Invalid,
    Kube,
    KubeError,
    NotFound,
    _unread,
    in_background,
)

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
    bodies: list[dict[str, Any]] = []

    class Core:
        def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> Unread:
            bodies.append(body)
            return Unread()

    kube = Kube(api=client.ApiClient(), stop=stop_after_attempt(1), sleep=Sleeps())
    kube.core = Core()  # type: ignore[assignment]
    at = datetime(2026, 11, 25, 12, 0, 1, tzinfo=UTC)
    asyncio.run(kube.event(namespace="ns", name="sj", uid="u", kind="ScavengerJob",
                           api_version="scavenger.dev/v1alpha1", type_="Normal", reason="Launched",
                           message="run sj-r1 launched", at=at))
    assert bodies[0]["firstTimestamp"] == bodies[0]["lastTimestamp"] == "2026-11-25T12:00:01Z"


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
