"""The one module that talks to the Kubernetes API.

The writes made for every SJ (its runs' Jobs and Services, its status, its Events, the labels steering
puts on its pods) and the reads a launch makes go through `_send`: one request on the event loop with
aiohttp, the body encoded and the answer decoded only when it is read. The other calls go through `_call`,
which runs the blocking client in one of `API_THREADS` worker threads (a third of a millisecond of CPU per
request against more than one through the client: its models, its argument checks, urllib3 and a thread's
round trip). Both make their attempts through `_retried`, which retries what is worth retrying (connection
errors, 429, 5xx) with exponential backoff (tenacity). What is not worth retrying is raised as a typed error
the controller knows how to handle: `NotFound`, `Conflict` (optimistic-concurrency loss or already exists),
`Invalid` (the API server refused the object), `Forbidden`, and `NameTaken` (a child's name is held by an
object its SJ does not control).

What an SJ owns is made, reused, patched and deleted only through the ``*_child`` calls, which act on an
object of the child's name only when the SJ controls it (`names.controlled_by`): a delete carries the uid of
the object meant as its precondition, so an object of the same name made since is left alone.

Each method declares the permissions its requests need (`needs`, collected in `ACCESS`): the chart's
ClusterRole and Role (deploy/chart/templates/rbac.yaml) grant exactly those of the methods the operator
calls, and `tests/unit/test_rbac.py` fails when a method's requests, the declarations or the chart drift
apart.
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
import re
import ssl
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, Final, Literal, NamedTuple, TypeVar, cast

import aiohttp
import orjson
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from tenacity import (
    AsyncRetrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_delay,
    wait_exponential_jitter,
)

from sj_operator.names import GROUP, MAX_OBJECT_NAME_LENGTH, PLURAL, VERSION, controlled_by, controller_uid

log = logging.getLogger(__name__)
T = TypeVar("T")
API_THREADS = 32
"""Worker threads (and pooled connections) for the blocking client, and connections for `_send`: calls wait
on the API server, not on this process's CPU, so far more of them are in flight than there are cores."""
BACKGROUND_THREADS = 16
"""Worker threads and connections (each kind its own) for the background lane (`in_background`): Events and
victim steering's writes, which nothing waits for. They have a pool of their own, so they never queue in
front of a launch or a transition, and at most this many of them load the API server at once."""
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
"""Answers worth asking again (0, no answer, is too)."""
SEND_TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=10)
"""How long one `_send` attempt may take; a request timed out is retried as a dropped connection is."""
_BACKGROUND: contextvars.ContextVar[bool] = contextvars.ContextVar("kube_background", default=False)
# Waits between retries: 0.2-0.4 s, 0.4-0.6 s, 0.8-1.0 s, ... capped at 5 s.
RETRY_WAIT = wait_exponential_jitter(multiplier=0.2, max=5.0, jitter=0.2)


Where = Literal["anywhere", "own namespace", "own lease", "own webhook secret", "own webhook configuration"]
"""Where a permission is needed: in any namespace (or of a cluster-scoped resource, any object); in the
operator's own namespace (any name: a create cannot be limited to a name); or only on one object of the
operator's own: its leader Lease and its webhook's Secret (in its namespace), its webhook configurations
(cluster-scoped, by name)."""


@dataclass(frozen=True)
class Access:
    """One permission: an RBAC verb on a resource (``jobs/status`` for a subresource) of an API group."""

    group: str
    resource: str
    verb: str
    where: Where = "anywhere"


def access(group: str, resource: str, *verbs: str, where: Where = "anywhere") -> tuple[Access, ...]:
    return tuple(Access(group, resource, verb, where) for verb in verbs)


ACCESS: Final[dict[str, tuple[Access, ...]]] = {}
"""What each `Kube` method's requests need, by method name (`needs`)."""
F = TypeVar("F", bound=Callable[..., Any])


def needs(*accesses: Access | tuple[Access, ...]) -> Callable[[F], F]:
    """Declares what the decorated `Kube` method's requests need (``test_rbac`` checks it against them)."""
    flat = tuple(a for item in accesses for a in (item if isinstance(item, tuple) else (item,)))

    def declare(fn: F) -> F:
        ACCESS[fn.__name__] = flat
        return fn

    return declare


class EventRef(NamedTuple):
    """An Event this process recorded: its name and uid (`Kube.event`, `Kube.update_event`)."""
    name: str
    uid: str


class KubeError(Exception):
    """An API call failed for good (after retries where retrying made sense)."""

    def __init__(self, status: int, reason: str, message: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if message else f"{status} {reason}")
        self.status, self.reason, self.message = status, reason, message


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class Invalid(KubeError):
    pass


class Forbidden(KubeError):
    """Refused by authorization or an admission rule (Pod Security, a ResourceQuota, a policy)."""


class NameTaken(KubeError):
    """An object of the name an SJ's child must have exists and the SJ does not control it (a user's object, or
    another SJ's): it is never taken as the SJ's, patched or deleted."""

    def __init__(self, kind: str, namespace: str, name: str, owner: str | None) -> None:
        whose = "no ScavengerJob controls it" if owner is None else f"it is controlled by ScavengerJob uid {owner}"
        super().__init__(409, "AlreadyExists", f"{kind} {namespace}/{name} exists and is not this SJ's ({whose})")
        self.kind, self.namespace, self.name, self.owner = kind, namespace, name, owner


class Gone(KubeError):
    """A watch's resourceVersion is older than the API server keeps (410): list again."""


class _Answered(Exception):
    """An answer worth asking again (`RETRIED_STATUSES`, or 0: none), typed once the retries have run out."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


_UNANSWERED = (aiohttp.ClientError, urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)
"""What a request raises when no answer came back (both clients' connection errors, a timeout): retried."""


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, (_Answered, *_UNANSWERED))


def _message(body: bytes) -> str:
    """The API server's ``message`` from a refusal's body (a Status), or the body itself."""
    try:
        return str(json.loads(body).get("message", ""))
    except (ValueError, AttributeError):
        return body.decode(errors="replace")[:1024]


def _json_default(value: Any) -> Any:
    """What the client's serialization makes of what JSON has no form for: a date or time in its ISO 8601
    form, a read-only mapping (a spec's frozen labels) as an object."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _typed(exc: ApiException) -> Exception:
    """The client's error as `_refused` makes it, with the API server's message from its body."""
    message = ""
    try:
        message = json.loads(exc.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = str(exc.body or "")
    return _refused(exc.status, exc.reason or "", message)


def _refused(status: int, reason: str, message: str) -> Exception:
    """An answer other than success: `_Answered` when it is worth asking again, else its typed error."""
    if status in (0, *RETRIED_STATUSES):
        return _Answered(status, reason, message)
    return _error(status, reason, message)


def _error(status: int, reason: str, message: str) -> KubeError:
    cls = {403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone, 422: Invalid}.get(status, KubeError)
    return cls(status, reason, message)


DEEPEST_JSON = 10_000
"""How deeply nested a document the API server decodes and so may store (its JSON decoder's limit), in the
fields a schema leaves free-form: a CRD's preserved unknown fields, an object's ``managedFields``."""


_LONG_DIGITS = re.compile(rb"\d{19}")
_LONG_DIGITS_TEXT = re.compile(r"\d{19}")


def loads(document: bytes | str) -> Any:
    """A JSON document decoded by orjson, a few times faster than Python's decoder (a burst's watch events are a
    tenth of the operator's CPU); by Python's where orjson would read it otherwise or refuses it: 19 digits in a
    row (orjson reads an integer beyond 64 bits, or below -2**63, as a float: such a number is read exactly, as
    before), a lone surrogate escaped, more than 1,024 levels of nesting (`decoded`). ValueError when it is no
    JSON; RecursionError when Python's decoder reaches its recursion limit."""
    long = (_LONG_DIGITS.search(document) if isinstance(document, bytes) else _LONG_DIGITS_TEXT.search(document))
    if long is None:
        try:
            return orjson.loads(document)
        except orjson.JSONDecodeError:
            pass
    return json.loads(document)


async def decoded(document: bytes | str) -> Any:
    """A JSON document from the API server, however deeply it nests (`loads`). Python's decoder stops at its
    recursion limit (about 1,000 levels) with a RecursionError, which is not a ValueError: one tenant's object
    nested deeper would end a watch cache's task, and its list again at every start. Such a document is decoded
    once more on a thread of its own (`_decoded_deep`) while the loop goes on; ValueError when it is no JSON."""
    try:
        return loads(document)
    except RecursionError:
        pass
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if answer.done():
            return
        if error is not None:
            answer.set_exception(error)
        else:
            answer.set_result(value)

    def decode() -> None:
        try:
            value = _decoded_deep(document)
        except BaseException as exc:  # handed to the loop's task as it is
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, value, None)

    with _MAKING:
        stack = threading.stack_size(_DEEP_STACK)
        try:
            threading.Thread(target=decode, name="deep-json", daemon=True).start()
        except RuntimeError as exc:  # no thread to be had: the document is not decoded, as any bad one
            raise ValueError(f"JSON document nested too deep to decode here: {exc}") from exc
        finally:
            threading.stack_size(stack)
    return await answer


_MAKING = threading.Lock()
"""Held while a deep decoder's thread is made: the stack size of new threads is the process's."""
_DEEP = threading.Lock()
"""Held while a deep decoder decodes: the recursion limit is the process's."""
_DEEP_STACK = 256 * 2**20
"""The stack of a deep decoder's thread: C's decoder on Python 3.11 takes a few hundred bytes a level."""


def _decoded_deep(document: bytes | str) -> Any:
    """``document`` decoded with the recursion limit raised for `DEEPEST_JSON` levels and more: by C's decoder
    (whose depth Python 3.11 bounds by that limit), else by the pure-Python one (which obeys the limit on every
    version; from 3.12 C's has a fixed bound below the API server's). Tenths of a second at 10,000 levels."""
    with _DEEP:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 3 * DEEPEST_JSON + limit))
        try:
            try:
                return json.loads(document)
            except RecursionError:
                decoder = json.JSONDecoder()
                decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
                text = document.decode() if isinstance(document, bytes) else document
                return decoder.decode(text)
        except RecursionError as exc:
            raise ValueError(f"JSON document nested deeper than {DEEPEST_JSON} levels") from exc
        finally:
            sys.setrecursionlimit(limit)


def split_lines(buffer: bytearray, chunk: bytes) -> list[bytes]:
    """Appends ``chunk`` to ``buffer`` and takes the complete lines out of it (without their newlines,
    empty ones skipped); an incomplete last line stays in ``buffer`` for the next chunk. A watch stream is
    one JSON event per line, and a line is as long as its object (no limit, unlike a reader's readline)."""
    buffer += chunk
    end = buffer.rfind(b"\n")
    if end < 0:
        return []
    lines = [line for line in bytes(buffer[:end]).split(b"\n") if line.strip()]
    del buffer[:end + 1]
    return lines


def in_background() -> None:
    """From here on, the calling task's API calls take the background lane (`BACKGROUND_THREADS`). A task
    gets a copy of its creator's context, so this marks only the task that calls it and the tasks it makes."""
    _BACKGROUND.set(True)


def _unread(fn: Callable[..., Any]) -> Callable[..., None]:
    """``fn`` for a write whose response body nobody reads: the client neither decodes nor models it (that is
    most of the client's own CPU per call), and the connection goes back to the pool at once. Failures are
    raised as before, with the API server's message in the body."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> None:
        response = fn(*args, _preload_content=False, **kwargs)
        response.drain_conn()
        response.release_conn()

    return call


def check_owner(existing: Mapping[str, Any], owner_uid: str) -> None:
    """Raises `NameTaken` unless the SJ of ``owner_uid`` controls ``existing`` (an object as read, with its kind)."""
    meta = existing.get("metadata") or {}
    if not controlled_by(meta, owner_uid):
        raise NameTaken(str(existing.get("kind", "")), str(meta.get("namespace", "")), str(meta.get("name", "")),
                        controller_uid(meta))


CHILD_PATHS: dict[str, tuple[str, str]] = {
    "Job": ("/apis/batch/v1/namespaces/{namespace}/jobs", "job"),
    "Service": ("/api/v1/namespaces/{namespace}/services", "service"),
    "ConfigMap": ("/api/v1/namespaces/{namespace}/configmaps", "config_map"),
    "Secret": ("/api/v1/namespaces/{namespace}/secrets", "secret"),
    "PodDisruptionBudget": ("/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", "pod_disruption_budget"),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", "endpoint_slice"),
}
"""The kinds an SJ owns: their collection's path, and their name in the client's methods (the metrics'
operation label: ``create_namespaced_job``)."""
_CHILD_RESOURCES: dict[str, tuple[str, str]] = {
    "Job": ("batch", "jobs"), "Service": ("", "services"), "ConfigMap": ("", "configmaps"),
    "Secret": ("", "secrets"), "PodDisruptionBudget": ("policy", "poddisruptionbudgets"),
    "EndpointSlice": ("discovery.k8s.io", "endpointslices"),
}
"""Their API group and resource, as RBAC names them."""
APPLIED_KINDS = ("ConfigMap", "PodDisruptionBudget", "EndpointSlice")
"""The kinds of an SJ's objects that are patched to say what they should (`Kube.apply_child`): a run's
hostfile, the protection budget, a gang's slice."""


def _child(kind: str, namespace: str, name: str | None = None) -> tuple[str, str]:
    """A child's path (its collection's without ``name``) and the client's name for its kind."""
    collection, noun = CHILD_PATHS[kind]
    path = collection.format(namespace=namespace)
    return (path if name is None else f"{path}/{name}"), noun


def _version(stored: Any) -> str:
    """The resourceVersion of an object as the API server answered it; a `KubeError` when it names none (a
    version of "" would be no precondition at all)."""
    meta = stored.get("metadata") if isinstance(stored, dict) else None
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    if not isinstance(version, str) or not version:
        raise KubeError(0, "NoVersion", "the API server's answer names no resourceVersion")
    return version


def _operation(fn: Callable[..., Any]) -> str:
    """The client method's name (``patch_namespaced_custom_object_status``): the metrics' operation label."""
    return getattr(fn, "__name__", type(fn).__name__)


class Kube:
    """Async facade over the official client, with retries and typed errors."""

    def __init__(self, api: client.ApiClient | None = None, *, retry_for: float = 30.0,
                 stop: Any = None, sleep: Callable[[float], Awaitable[None]] | None = None) -> None:
        """`retry_for`: how long transient errors are retried; `stop` and `sleep` replace tenacity's
        stop condition and sleep (tests use them to retry without waiting)."""
        if api is None:
            configuration = client.Configuration.get_default_copy()
            configuration.connection_pool_maxsize = API_THREADS + BACKGROUND_THREADS  # one per worker thread
            api = client.ApiClient(configuration)
        self.api = api
        self._threads = ThreadPoolExecutor(max_workers=API_THREADS, thread_name_prefix="kube-api")
        self._background = ThreadPoolExecutor(max_workers=BACKGROUND_THREADS, thread_name_prefix="kube-background")
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.policy = client.PolicyV1Api(self.api)
        self.scheduling = client.SchedulingV1Api(self.api)
        self.coordination = client.CoordinationV1Api(self.api)
        self.retry_for = retry_for
        self.stop = stop if stop is not None else stop_after_delay(retry_for)
        self.sleep = sleep if sleep is not None else asyncio.sleep
        self.on_error: Callable[[str, int], None] = lambda operation, status: None
        """Told of every failed attempt (operation, HTTP status; 0 without a response): the metrics."""
        self.on_request: Callable[[str], None] = lambda operation: None
        """Told of every attempt (operation): the metrics."""
        self._session: aiohttp.ClientSession | None = None
        self._event_stamp = 0
        """The last stamp an Event's name was given (`_event_name`)."""
        self.instance = "scavenger"
        """Who records the Events (their ``reportingInstance``): the process's identity, as client-go's recorder
        names its host, so that an Event tells which replica recorded it."""
        self._senders: dict[bool, tuple[asyncio.AbstractEventLoop, aiohttp.ClientSession]] = {}

    @classmethod
    def from_environment(cls) -> Kube:
        try:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
        except config.ConfigException:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        return cls()

    def _retrying(self) -> AsyncRetrying:
        return AsyncRetrying(
            retry=retry_if_exception(_transient),
            wait=RETRY_WAIT,
            stop=self.stop,
            sleep=self.sleep,
            before_sleep=before_sleep_log(log, logging.WARNING),
            reraise=True,
        )

    async def _retried(self, operation: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()`` until it succeeds: each attempt counted (`on_request`) and each failure reported
        (`on_error`), what is worth it (`_transient`) retried while ``stop`` allows. What is not, and what
        still fails when the retries run out, is raised as a typed `KubeError`."""
        try:
            async for retrying in self._retrying():
                with retrying:
                    self.on_request(operation)
                    try:
                        return await attempt()
                    except (_Answered, KubeError) as exc:
                        self.on_error(operation, exc.status or 0)
                        raise
                    except _UNANSWERED:
                        self.on_error(operation, 0)
                        raise
        except _Answered as exc:
            raise _error(exc.status, exc.reason, exc.message) from None
        except _UNANSWERED as exc:
            # Retried until retry_for ran out: a failure for good, typed like the others (status 0 as
            # the client uses for "no HTTP response").
            raise KubeError(0, type(exc).__name__, str(exc)) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, a call of the blocking client, on a worker thread of the calling task's
        lane (`in_background`), retried and typed by `_retried`."""

        async def attempt() -> T:
            try:
                return await asyncio.get_running_loop().run_in_executor(
                    self._background if _BACKGROUND.get() else self._threads, functools.partial(fn, *args, **kwargs))
            except ApiException as exc:
                raise _typed(exc) from None

        return await self._retried(_operation(fn), attempt)

    # --- raw requests: the watch caches' lists and watches, and the writes made for every SJ -----------
    # The client's watch decodes every event into its models, and kopf's costs a worker's round per event;
    # the watch caches (`caches.py`: every pod of the cluster, the runs' Jobs) read the raw stream
    # themselves: one JSON decode per event, on the loop, with the client's own host and credentials.
    def _ssl(self) -> ssl.SSLContext:
        conf = self.api.configuration
        context = ssl.create_default_context(cafile=conf.ssl_ca_cert)
        if conf.cert_file:
            context.load_cert_chain(conf.cert_file, conf.key_file)
        if not conf.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def _new_session(self, limit: int) -> aiohttp.ClientSession:
        """A session on the client's host and credentials, of at most ``limit`` connections (0: no limit)."""
        return aiohttp.ClientSession(base_url=self.api.configuration.host,
                                     connector=aiohttp.TCPConnector(ssl=self._ssl(), limit=limit))

    def _http(self) -> aiohttp.ClientSession:
        """The watch caches' session: no limit on its connections, as each cache holds one open for its
        watch (a limit below their number starved the last cache's list)."""
        if self._session is None or self._session.closed:
            self._session = self._new_session(limit=0)
        return self._session

    def _sender(self) -> aiohttp.ClientSession:
        """The calling task's lane's session (`in_background`), made on the running loop."""
        background, loop = _BACKGROUND.get(), asyncio.get_running_loop()
        made = self._senders.get(background)
        if made is None or made[0] is not loop or made[1].closed:
            made = self._senders[background] = (
                loop, self._new_session(limit=BACKGROUND_THREADS if background else API_THREADS))
        return made[1]

    async def _send(self, method: str, path: str, operation: str, body: Mapping[str, Any] | None = None, *,
                    params: Mapping[str, str] | None = None, content_type: str = "application/json",
                    read: bool = False) -> Any:
        """One request on the calling task's lane, retried and typed by `_retried` as `_call`'s are; the answer
        decoded when ``read`` (else None: it is read off the connection and dropped). ``operation`` names it
        for the metrics as the client's method would."""
        data = None if body is None else json.dumps(body, default=_json_default)

        async def attempt() -> Any:
            headers = self._headers() if data is None else {**self._headers(), "Content-Type": content_type}
            async with self._sender().request(method, path, data=data, params=params, headers=headers,
                                              timeout=SEND_TIMEOUT) as response:
                answer = await response.read()
            if response.status < 300:
                return loads(answer) if read else None
            raise _refused(response.status, response.reason or "", _message(answer))

        return await self._retried(operation, attempt)

    def _headers(self) -> dict[str, str]:
        """The client's credentials for a request now (a bearer token is read again as it rotates)."""
        headers = {"Accept": "application/json"}
        for setting in self.api.configuration.auth_settings().values():  # as the client's own requests do
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    async def _get(self, path: str, params: Mapping[str, str], timeout: float) -> aiohttp.ClientResponse:
        operation = "list_raw" if "watch" not in params else "watch_raw"
        self.on_request(operation)
        try:
            response = await self._http().get(path, params=params, headers=self._headers(),
                                              timeout=aiohttp.ClientTimeout(total=timeout, sock_connect=10))
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.on_error(operation, 0)
            raise KubeError(0, type(exc).__name__, str(exc)) from exc
        if response.status != 200:
            self.on_error(operation, response.status)
            try:
                message = _message(await response.read())
            except (aiohttp.ClientError, TimeoutError):
                message = ""
            finally:
                response.release()
            raise _error(response.status, response.reason or "", message)
        return response

    @needs()  # list of the path given: the watch caches' paths (`caches.py`)
    async def list_raw(self, path: str, *, selector: str | None = None,
                       page: int = 500) -> tuple[list[dict[str, Any]], str]:
        """Every object at ``path`` (``/api/v1/pods``) with the labels ``selector`` asks for, as the API
        server's dicts, a page at a time; and the list's resourceVersion, from which a watch continues."""
        items: list[dict[str, Any]] = []
        first = {"limit": str(page), **({"labelSelector": selector} if selector else {})}
        params = first
        while True:
            response = await self._get(path, params, timeout=60)
            try:
                found = await decoded(await response.read())
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise KubeError(0, type(exc).__name__, str(exc)) from exc
            finally:
                response.release()
            items.extend(found.get("items") or [])
            meta = found.get("metadata") or {}
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion", ""))
            params = {**first, "continue": meta["continue"]}

    @needs()  # watch of the path given, likewise
    async def watch_raw(self, path: str, resource_version: str, *, selector: str | None = None,
                        timeout: int = 270) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The events at ``path`` after ``resource_version``, as (type, object) with bookmarks, until the
        API server ends the watch (after about ``timeout`` seconds). Raises `Gone` when that version is too
        old to continue from, and `KubeError` when the stream breaks."""
        params = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(timeout), **({"labelSelector": selector} if selector else {})}
        response = await self._get(path, params, timeout=timeout + 30)
        buffer = bytearray()
        try:
            async for chunk in response.content.iter_any():
                for line in split_lines(buffer, chunk):
                    event = await decoded(line)
                    kind, obj = event.get("type", ""), event.get("object") or {}
                    if kind == "ERROR":
                        raise _error(int(obj.get("code") or 0), obj.get("reason") or "", obj.get("message") or "")
                    yield kind, obj
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise KubeError(0, type(exc).__name__, str(exc)) from exc
        finally:
            response.release()

    @needs()
    async def close(self) -> None:
        sessions = [made[1] for made in self._senders.values()
                    if made[0] is asyncio.get_running_loop()]
        self._senders.clear()
        for session in [self._session, *sessions]:
            if session is not None:
                await session.close()

    # --- Leases (leader election) -----------------------------------------------
    @needs(Access("coordination.k8s.io", "leases", "get", "own lease"))
    async def read_lease(self, namespace: str, name: str) -> Any:
        return await self._call(self.coordination.read_namespaced_lease, name, namespace)

    @needs(Access("coordination.k8s.io", "leases", "create", "own namespace"))
    async def create_lease(self, namespace: str, body: Mapping[str, Any]) -> None:
        await self._call(self.coordination.create_namespaced_lease, namespace, body)

    @needs(Access("coordination.k8s.io", "leases", "update", "own lease"))
    async def replace_lease(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """Fails with Conflict when the Lease changed since ``body``'s resourceVersion was read."""
        await self._call(self.coordination.replace_namespaced_lease, name, namespace, body)

    @needs(Access("coordination.k8s.io", "leases", "patch", "own lease"))
    async def patch_lease(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        await self._call(self.coordination.patch_namespaced_lease, name, namespace, patch)

    # --- ScavengerJobs -------------------------------------------------------
    @needs(Access(GROUP, f"{PLURAL}/status", "patch"))
    async def patch_sj_status(self, namespace: str, name: str, status: Mapping[str, Any],
                              resource_version: str | None) -> dict[str, Any]:
        """Merge-patches status; with resource_version, fails with Conflict if the SJ changed since."""
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        patched = await self._send("PATCH", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status",
                                   "patch_namespaced_custom_object_status", body,
                                   content_type="application/merge-patch+json", read=True)
        return cast(dict[str, Any], patched)

    # --- what an SJ owns: runs' Jobs and Services, MPI Secrets and hostfiles, budgets -----------------------
    @needs(*(access(group, resource, "create", "get") for group, resource in _CHILD_RESOURCES.values()))
    async def create_child(self, body: Mapping[str, Any], owner_uid: str) -> dict[str, Any] | None:
        """Creates an object the SJ of ``owner_uid`` owns (``body`` names its kind). None when it was made; the
        object as stored when one of its name exists that this SJ controls (made by an earlier launch whose
        answer was lost, or by another decider). Raises `NameTaken` when one exists that it does not control:
        such an object is never taken as the SJ's."""
        meta = body["metadata"]
        path, noun = _child(body["kind"], meta["namespace"])
        try:
            await self._send("POST", path, f"create_namespaced_{noun}", body)
            return None
        except Conflict:
            return await self._own_stored(body, owner_uid)

    @needs(*(access(group, resource, "create", "get", "patch") for group, resource in
             (_CHILD_RESOURCES[kind] for kind in APPLIED_KINDS)))
    async def apply_child(self, body: Mapping[str, Any], owner_uid: str, patch: Mapping[str, Any], *,
                          version: str | None = None,
                          same: Callable[[Mapping[str, Any]], bool] | None = None) -> str:
        """Makes the SJ's object ``body`` (a kind of `APPLIED_KINDS`) say what it should: creates it, or, when
        one of its name exists that the SJ controls, merge-patches it with ``patch`` as read (Conflict when it
        changed since), unless ``same`` finds it saying so already. ``version`` is what an earlier call
        returned for it: it is patched at that version without a create or a read (Conflict or NotFound when
        it changed or went since; the caller then forgets the version). Returns the version it has after.
        Raises `NameTaken` as `create_child` does."""
        kind, meta = body["kind"], body["metadata"]
        if version is not None:
            return await self.patch_child(kind, meta["namespace"], meta["name"], patch, version)
        path, noun = _child(kind, meta["namespace"])
        try:
            return _version(await self._send("POST", path, f"create_namespaced_{noun}", body, read=True))
        except Conflict:
            existing = await self._own_stored(body, owner_uid)
        stored = _version(existing)
        if same is not None and same(existing):
            return stored
        return await self.patch_child(kind, meta["namespace"], meta["name"], patch, stored)

    async def _own_stored(self, body: Mapping[str, Any], owner_uid: str) -> dict[str, Any]:
        """The object of ``body``'s name as stored, whose create was refused as existing: `NameTaken` when the SJ
        of ``owner_uid`` does not control it, Conflict when it is gone since (made on a later try)."""
        meta = body["metadata"]
        existing = await self.read_child(body["kind"], meta["namespace"], meta["name"])
        if existing is None:
            raise Conflict(409, "AlreadyExists", f"{body['kind']} {meta['namespace']}/{meta['name']} existed "
                                                 "and was deleted meanwhile")
        check_owner(existing, owner_uid)
        return existing

    @needs(*(Access(group, resource, "get") for group, resource in _CHILD_RESOURCES.values()))
    async def read_child(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object of an SJ child's kind and name as stored (with its kind), or None when there is none."""
        path, noun = _child(kind, namespace, name)
        try:
            found = await self._send("GET", path, f"read_namespaced_{noun}", read=True)
        except NotFound:
            return None
        return {**cast(dict[str, Any], found), "kind": kind}

    @needs(*(Access(*_CHILD_RESOURCES[kind], "patch") for kind in APPLIED_KINDS))
    async def patch_child(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any],
                          resource_version: str) -> str:
        """Merge-patches an SJ's child as read at ``resource_version`` (whose owner the caller checked): Conflict
        when it changed since, so an object of that name made meanwhile by anyone else is never patched. Returns
        the version it has after."""
        path, noun = _child(kind, namespace, name)
        meta = {**(patch.get("metadata") or {}), "resourceVersion": resource_version}
        return _version(await self._send("PATCH", path, f"patch_namespaced_{noun}", {**patch, "metadata": meta},
                                         content_type="application/merge-patch+json", read=True))

    @needs(Access("batch", "jobs", "delete"), Access("", "services", "delete"),
           Access("discovery.k8s.io", "endpointslices", "delete"))
    async def delete_child(self, kind: str, namespace: str, name: str, uid: str) -> bool:
        """Deletes the object of that name if it is still the one of ``uid`` (a precondition: whoever made one
        of the same name since keeps it); what it owns (a Job's pods) is deleted by the garbage collector, each
        with its grace period. False when it is gone or is another object now."""
        path, noun = _child(kind, namespace, name)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid},
                "propagationPolicy": "Background"}
        try:
            await self._send("DELETE", path, f"delete_namespaced_{noun}", body)
        except (NotFound, Conflict):  # gone, or the precondition failed: another object has the name now
            return False
        return True

    @needs(access("batch", "jobs", "get", "delete"), access("", "services", "get", "delete"),
           access("discovery.k8s.io", "endpointslices", "get", "delete"))
    async def delete_owned(self, kind: str, namespace: str, name: str, owner_uid: str) -> bool:
        """Deletes the object of that kind and name when the SJ of ``owner_uid`` controls it (read first, deleted
        with its uid as the precondition); another's object of that name is left alone. True when deleted."""
        existing = await self.read_child(kind, namespace, name)
        if existing is None:
            return False
        meta = existing.get("metadata") or {}
        if not controlled_by(meta, owner_uid):
            log.warning("%s %s/%s is not this SJ's (%s): not deleted", kind, namespace, name,
                        controller_uid(meta) or "no ScavengerJob controls it")
            return False
        return await self.delete_child(kind, namespace, name, str(meta.get("uid", "")))

    @needs()  # what ``create`` needs
    async def create_or_keep(self, create: Callable[[], Any]) -> bool:
        """Runs a create call; returns False when the object already existed."""
        try:
            await create()
            return True
        except Conflict:
            return False

    @needs(Access("", "persistentvolumeclaims", "get"), Access("", "configmaps", "get"),
           Access("", "secrets", "get"))
    async def exists(self, kind: str, namespace: str, name: str) -> bool:
        """Whether an object a spec refers to (a volume's claim, ConfigMap or Secret) exists."""
        read = {
            "persistentVolumeClaim": self.core.read_namespaced_persistent_volume_claim,
            "configMap": self.core.read_namespaced_config_map,
            "secret": self.core.read_namespaced_secret,
        }[kind]
        try:
            await self._call(read, name, namespace)
            return True
        except NotFound:
            return False

    # --- the webhook's certificates and configuration ----------------------------
    @needs(Access("", "secrets", "get", "own webhook secret"))
    async def read_secret(self, namespace: str, name: str) -> Any:
        return await self._call(self.core.read_namespaced_secret, name, namespace)

    @needs(Access("", "secrets", "create", "own namespace"))
    async def create_secret(self, secret: Mapping[str, Any]) -> None:
        """Fails with Conflict when a Secret of that name exists."""
        await self._call(self.core.create_namespaced_secret, secret["metadata"]["namespace"], secret)

    @needs(Access("", "secrets", "update", "own webhook secret"))
    async def replace_secret(self, secret: Mapping[str, Any]) -> None:
        """Fails with Conflict when the Secret changed since ``secret``'s resourceVersion was read."""
        meta = secret["metadata"]
        await self._call(self.core.replace_namespaced_secret, meta["name"], meta["namespace"], secret)

    @needs(Access("admissionregistration.k8s.io", "validatingwebhookconfigurations", "patch",
                  "own webhook configuration"),
           Access("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch",
                  "own webhook configuration"))
    async def patch_ca_bundle(self, kind: Literal["validating", "mutating"], name: str, webhook: str,
                              ca_bundle: str) -> None:
        """Sets the ``caBundle`` of ``webhook`` in the webhook configuration ``name`` (which the chart ships),
        leaving the rest as it is: a strategic merge patch of that one webhook, found by its name. Raises
        NotFound when the configuration is missing, and Invalid when it has no webhook of that name (a
        strategic merge would add one, which the API server refuses as incomplete)."""
        await self._send("PATCH", f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations/{name}",
                         f"patch_{kind}_webhook_configuration",
                         {"webhooks": [{"name": webhook, "clientConfig": {"caBundle": ca_bundle}}]},
                         content_type="application/strategic-merge-patch+json")

    # --- adopted Jobs ------------------------------------------------------------------
    @needs(Access(GROUP, PLURAL, "create"))
    async def create_sj(self, sj: Mapping[str, Any]) -> bool:
        """Creates an SJ; False when one of that name exists."""
        return await self.create_or_keep(lambda: self._call(
            self.custom.create_namespaced_custom_object, GROUP, VERSION, sj["metadata"]["namespace"], PLURAL, sj))

    @needs(Access("batch", "jobs/status", "patch"))
    async def patch_job_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        await self._call(self.batch.patch_namespaced_job_status, name, namespace, {"status": dict(status)})

    # --- what the namespace allows ---------------------------------------------------
    @needs(Access("", "pods", "create"))  # dry runs only: the chart's operator guard refuses others
    async def dry_run_pod(self, pod: Mapping[str, Any]) -> None:
        """Creates ``pod`` as a server-side dry run: every admission rule of its namespace is applied and
        nothing is stored. Raises Forbidden (or Invalid) with the API server's reason when refused."""
        await self._send("POST", f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", "create_namespaced_pod",
                         pod, params={"dryRun": "All"})

    # --- pods and budgets ------------------------------------------------------
    @needs(Access("", "pods", "patch"))  # only its protection label: the operator guard
    async def label_pod(self, namespace: str, name: str, labels: Mapping[str, str | None]) -> None:
        with contextlib.suppress(NotFound):
            await self._send("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", "patch_namespaced_pod",
                             {"metadata": {"labels": dict(labels)}}, content_type="application/merge-patch+json")

    @needs(Access("scheduling.k8s.io", "priorityclasses", "create"))
    async def ensure_priority_class(self, pc: Mapping[str, Any]) -> bool:
        """Creates a PriorityClass unless one of that name exists (never clobbers). True if created."""
        try:
            await self._call(self.scheduling.create_priority_class, pc)
            return True
        except Conflict:
            return False

    # --- events ------------------------------------------------------------------
    @needs(Access("", "events", "create"), Access("", "events", "get"))
    async def event(self, *, namespace: str, name: str, uid: str, kind: str, api_version: str,
                    type_: str, reason: str, message: str, component: str = "scavenger",
                    at: datetime | None = None, first: datetime | None = None, count: int = 1,
                    named: bool = False) -> EventRef | None:
        """Records an Event that happened ``at`` (default: now), ``count`` times since ``first`` (default: once,
        then). With ``named``, its name and uid (the answer is read for them), None when it could not be recorded
        (logged: an Event is best effort); else None (the answer is not decoded)."""
        now = at or datetime.now(UTC)
        event_name = self._event_name(name)
        body = event_body(event_name, namespace=namespace, name=name, uid=uid, kind=kind, api_version=api_version,
                          type_=type_, reason=reason, message=message, component=component, instance=self.instance,
                          at=now, first=first or now, count=count)
        try:
            try:
                made = await self._send("POST", f"/api/v1/namespaces/{namespace}/events", "create_namespaced_event",
                                        body, read=named)
            except Conflict:
                # The name is this call's own: an earlier attempt of it was stored though its answer was lost (a
                # 504, a dropped connection). It is recorded; a named one is read back for its uid.
                made = await self._send("GET", f"/api/v1/namespaces/{namespace}/events/{event_name}",
                                        "read_namespaced_event", read=True) if named else None
        except KubeError as exc:  # an event is best effort: never block a transition on it
            log.warning("could not record event %s on %s/%s: %s", reason, namespace, name, exc)
            return None
        meta = made.get("metadata") if isinstance(made, dict) else None
        made_name, made_uid = (meta.get("name"), meta.get("uid")) if isinstance(meta, dict) else (None, None)
        return EventRef(made_name, made_uid) if isinstance(made_name, str) and isinstance(made_uid, str) else None

    def _event_name(self, involved: str) -> str:
        """A new Event's name, as client-go's recorder names one: the object's name and a stamp (hex nanoseconds,
        never the same twice in this process). Fixed before the first attempt, so that a create retried after an
        attempt whose answer was lost finds the Event made (409) instead of making a second one, as a
        ``generateName`` would."""
        self._event_stamp = max(time.time_ns(), self._event_stamp + 1)
        stamp = f"{self._event_stamp:x}"
        return f"{involved[:MAX_OBJECT_NAME_LENGTH - len(stamp) - 1]}.{stamp}"

    @needs(Access("", "events", "patch"))
    async def update_event(self, namespace: str, event: EventRef, *, count: int, last: datetime, message: str) -> bool:
        """Writes how often an Event this process recorded has occurred, when it last did and its latest message
        (a merge patch of its ``count``, ``lastTimestamp`` and ``message``, as client-go's recorder updates an Event
        it sees again); False when the Event is gone or is no longer the one recorded (someone made another of its
        name: the patch names the uid, which the API server does not let a patch change). Raises `KubeError` when
        the API server refused."""
        body = {"metadata": {"uid": event.uid}, "count": count, "lastTimestamp": _timestamp(last),
                "message": message[:1024]}
        try:
            await self._send("PATCH", f"/api/v1/namespaces/{namespace}/events/{event.name}", "patch_namespaced_event",
                             body, content_type="application/merge-patch+json")
        except (NotFound, Conflict, Invalid):
            return False
        return True


def event_body(event_name: str, *, namespace: str, name: str, uid: str, kind: str, api_version: str, type_: str,
               reason: str, message: str, component: str, instance: str, at: datetime, first: datetime,
               count: int) -> dict[str, Any]:
    """An Event named ``event_name`` about the object ``name`` (its kind, API version and uid), as `Kube.event`
    records one: occurred ``count`` times from ``first`` to ``at``, recorded by ``instance`` of ``component``."""
    return {
        "metadata": {"name": event_name, "namespace": namespace},
        "involvedObject": {"apiVersion": api_version, "kind": kind, "name": name, "namespace": namespace, "uid": uid},
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": _timestamp(first),
        "lastTimestamp": _timestamp(at),
        "count": count,
    }


def _timestamp(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")
