"""When each ScavengerJob's Job, and its phase Running, are first seen: a benchmark's clock on the operator.

`Recorder` watches the Jobs and SJs of one namespace from threads of this process; `RecorderProcess` from a
process of its own, for bursts in which decoding every event here would slow the threads being timed.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from benchmarks.harness.kube import RawWatch, resource_version
from sj_operator.names import GROUP, KIND, LABEL_SJ, PLURAL, VERSION


class Recorder:
    """Watches Jobs and SJs of one namespace; records when each SJ's Job / phase Running is first seen."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.job_seen: dict[str, float] = {}
        self.running_seen: dict[str, float] = {}
        self.finished: dict[str, str] = {}  # SJ name -> terminal phase (Succeeded/Failed) if seen
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    # Each watch gets an ApiClient of its own: its long-running request must not take a pooled
    # connection from the operator or the creating threads.
    def start(self) -> None:
        batch = client.BatchV1Api(client.ApiClient())
        custom = client.CustomObjectsApi(client.ApiClient())
        jobs_rv = resource_version(batch.list_namespaced_job(self.namespace, label_selector=LABEL_SJ))
        sjs_rv = resource_version(custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL))
        self._threads = [
            threading.Thread(target=self._watch, name="watch jobs", daemon=True,
                             args=(batch.list_namespaced_job, (self.namespace,), {"label_selector": LABEL_SJ},
                                   jobs_rv, self._on_job)),
            threading.Thread(target=self._watch, name="watch sjs", daemon=True,
                             args=(custom.list_namespaced_custom_object, (GROUP, VERSION, self.namespace, PLURAL),
                                   {}, sjs_rv, self._on_sj)),
        ]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self, list_fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], rv: str,
               on_event: Callable[[float, Any], None]) -> None:
        """Streams events from `rv` on, resuming after server-side timeouts until stopped."""
        while not self._stop.is_set():
            w = RawWatch()
            try:
                for event in w.stream(list_fn, *args, resource_version=rv, timeout_seconds=30,
                                      allow_watch_bookmarks=True, **kwargs):
                    at = time.monotonic()
                    if event["type"] == "ERROR":
                        raw = event.get("raw_object") or {}
                        raise ApiException(status=raw.get("code", 500), reason=raw.get("reason", "watch error"))
                    obj = event["object"]
                    rv = resource_version(obj)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        on_event(at, obj)
                    if self._stop.is_set():
                        w.stop()
                        break
            except ApiException as exc:
                if exc.status == 410:  # history compacted: everything before now was already seen
                    rv = resource_version(list_fn(*args, **kwargs, limit=1))
                    continue
                self.errors.append(exc)
                time.sleep(0.5)
            except Exception as exc:  # connection trouble: resume from the last resourceVersion
                if self._stop.is_set():
                    return
                self.errors.append(exc)
                time.sleep(0.5)

    def _on_job(self, at: float, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        owners = meta.get("ownerReferences") or []
        sj = next((o["name"] for o in owners if o["kind"] == KIND and o.get("controller")), None)
        if sj is None:
            sj = (meta.get("labels") or {}).get(LABEL_SJ)
        with self._cond:
            if sj and sj not in self.job_seen:
                self.job_seen[sj] = at
                self._cond.notify_all()

    def _on_sj(self, at: float, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        phase = (body.get("status") or {}).get("phase")
        with self._cond:
            if phase == "Running" and name not in self.running_seen:
                self.running_seen[name] = at
                self._cond.notify_all()
            if phase in ("Succeeded", "Failed") and name not in self.finished:
                self.finished[name] = phase
                self._cond.notify_all()

    def started_or_ended(self, name: str) -> bool:
        return name in self.running_seen or name in self.finished

    def wait(self, what: str, predicate: Callable[[], bool], timeout: float) -> None:
        with self._cond:
            if not self._cond.wait_for(predicate, timeout):
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


class RecorderProcess(Recorder):
    """A `Recorder` whose watches run in a process of their own, so that decoding every event of a burst
    takes nothing from the threads creating the measured objects in this one (they would share its
    interpreter lock). The child sends what it sees first (each SJ's Job, Running, terminal phase) with the
    monotonic time its watch saw it, which is the same clock here."""

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None

    def start(self) -> None:
        spawn = multiprocessing.get_context("spawn")
        parent, child = spawn.Pipe()
        self._process = spawn.Process(
            target=_record, args=(self.namespace, child), name="recorder", daemon=True)
        self._process.start()
        child.close()
        if not parent.poll(120) or parent.recv() != "started":  # it lists before the first create
            raise RuntimeError("the recorder process did not start")
        self._conn = parent
        reader = threading.Thread(target=self._read, args=(parent,), name="recorder reader", daemon=True)
        reader.start()
        self._threads = [reader]

    def _read(self, conn: Connection) -> None:
        while True:
            try:
                jobs, running, finished = conn.recv()
            except (EOFError, OSError):
                return
            with self._cond:
                for name, at in jobs:
                    self.job_seen.setdefault(name, at)
                for name, at in running:
                    self.running_seen.setdefault(name, at)
                self.finished.update((name, phase) for name, phase in finished if name not in self.finished)
                self._cond.notify_all()

    def stop(self) -> None:
        super().stop()
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.send("stop")
        if self._process is not None:
            self._process.join(30)
            if self._process.is_alive():
                self._process.kill()


def _record(namespace: str, conn: Connection) -> None:
    """The recorder process: a `Recorder` whose new sightings go to ``conn`` every 50 ms, until told to stop."""
    config.load_kube_config()
    rec = Recorder(namespace)
    rec.start()
    conn.send("started")
    sent = (0, 0, 0)
    while True:
        stop = conn.poll(0.05)
        with rec._cond:
            jobs, running, finished = list(rec.job_seen.items()), list(rec.running_seen.items()), \
                list(rec.finished.items())
        if (len(jobs), len(running), len(finished)) != sent:  # dicts keep their order: what is new is last
            conn.send((jobs[sent[0]:], running[sent[1]:], finished[sent[2]:]))
            sent = (len(jobs), len(running), len(finished))
        if stop:
            rec.stop()
            return
