"""Faults for the e2e fault tests: an API server proxy that misbehaves, and a record of every Job made.

``FaultProxy`` listens on loopback (plain HTTP) and forwards to the real API server with the cluster's
admin credentials. For a share of requests it answers 429 or a 5xx without forwarding, answers 409 to a
write, drops the connection before forwarding or after (the write applied, its answer lost), and ends
watch streams early, some with the ``410 Expired`` event an API server sends when a watch falls out of
its window. The operator under test gets a kubeconfig pointing at it.

``JobRecorder`` watches Jobs directly (not through the proxy) and keeps every Job ever created, so a
test can tell that no run was launched twice.
"""
from __future__ import annotations

import asyncio
import json
import random
import ssl
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import urllib3
import yaml
from aiohttp import web
from kubernetes import client, watch

_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class FaultProxy:
    """A misbehaving front for the API server; ``injected`` counts what it did."""

    def __init__(self, kubeconfig: str, *, share: float, watch_share: float = 0.5, seed: int = 1) -> None:
        self.share, self.watch_share = share, watch_share
        self.rnd = random.Random(seed)
        self.injected: Counter[str] = Counter()
        self.forwarded = 0
        config = yaml.safe_load(Path(kubeconfig).read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        self.upstream = cluster["server"].rstrip("/")
        self.ssl = ssl.create_default_context(cafile=cluster["certificate-authority"])
        self.ssl.load_cert_chain(user["client-certificate"], user["client-key"])
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None

    # --- lifecycle ------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._started.wait(30):
            raise RuntimeError("the fault proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(30)

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "proxy",
            "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "proxy", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
        }))
        return path

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        connector = aiohttp.TCPConnector(ssl=self.ssl, limit=200)
        async with aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                         timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)) as session:
            self.session = session
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._started.set()
            await self._stop.wait()
            await runner.cleanup()

    # --- faults -----------------------------------------------------------------------
    def _fault(self, request: web.Request) -> str | None:
        watching = request.query.get("watch") in ("true", "1")
        if self.rnd.random() >= (self.watch_share if watching else self.share):
            return None
        if watching:  # an expired watch first, then cut and expired by turns
            return "watch-cut" if self.injected["watch-410"] > self.injected["watch-cut"] else "watch-410"
        writes = request.method in ("PATCH", "PUT")
        choices = ["429", "500", "503", "drop-before", "drop-after"] + (["409"] if writes else [])
        return self.rnd.choice(choices)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        fault = self._fault(request)
        if fault is not None:
            self.injected[fault] += 1
        if fault in ("429", "500", "503", "409"):
            code = int(fault)  # type: ignore[arg-type]
            headers = {"Retry-After": "1"} if code == 429 else {}
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                                      "reason": "InjectedFault", "message": f"injected {code}"},
                                     status=code, headers=headers)
        if fault == "drop-before":
            return self._drop(request)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        self.forwarded += 1
        async with self.session.request(request.method, self.upstream + request.path_qs, data=body or None,
                                        headers=headers, skip_auto_headers=("Content-Type",)) as upstream:
            if fault == "drop-after":
                await upstream.read()  # the API server did it; the answer is lost
                return self._drop(request)
            response = web.StreamResponse(status=upstream.status, headers={
                k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS})
            await response.prepare(request)
            events = 0
            async for line in upstream.content:
                await response.write(line)
                events += 1
                if fault in ("watch-410", "watch-cut") and events >= 3:
                    if fault == "watch-410":
                        await response.write(json.dumps({"type": "ERROR", "object": {
                            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                            "reason": "Expired", "message": "too old resource version (injected)"}}).encode() + b"\n")
                    break
            await response.write_eof()
            return response

    @staticmethod
    def _drop(request: web.Request) -> web.Response:
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=502)


class JobRecorder:
    """Every Job ADDED in ``namespace``, as (name, uid), watched straight from the API server."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.added: list[tuple[str, str]] = []
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, name="job-recorder", daemon=True)

    def start(self) -> JobRecorder:
        self._thread.start()
        return self

    def _run(self) -> None:
        batch = client.BatchV1Api(self.api)
        seen: set[str] = set()
        version: str | None = None  # a watch from nothing lists what exists first, as ADDED events
        while not self._watch._stop:
            try:
                for event in self._watch.stream(batch.list_namespaced_job, self.namespace, resource_version=version,
                                                timeout_seconds=60):
                    job: Any = event["object"]
                    version = job.metadata.resource_version
                    if job.metadata.uid not in seen:
                        seen.add(job.metadata.uid)
                        self.added.append((job.metadata.name, job.metadata.uid))
            except (client.ApiException, urllib3.exceptions.HTTPError, ValueError):
                # The stream broke (an API server or etcd restart) or expired: watch again from nothing.
                version = None
                time.sleep(0.5)

    def stop(self) -> None:
        self._watch.stop()

    def runs_by_sj(self) -> dict[str, list[str]]:
        """The runs made for each SJ (a name twice means it was launched twice)."""
        out: dict[str, list[str]] = {}
        for name, _ in self.added:
            out.setdefault(name.rsplit("-r", 1)[0], []).append(name)
        return out
