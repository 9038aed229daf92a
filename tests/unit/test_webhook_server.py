"""The webhook server (sj_operator.webhook): real HTTPS on loopback, a fake Kubernetes API.

It answers reviews over TLS that the API server's trust (the CA bundle it set in the webhook
configurations) accepts; it takes a renewed certificate without a restart; replicas racing to renew end up
on one bundle; it only patches the caBundle of configurations made by others, waiting for one that is
missing; no CA key is ever written.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from sj_operator.admission import VALIDATE_PATH
from sj_operator.adoption import MUTATE_PATH
from sj_operator.api import DEFAULT_LIMITS
from sj_operator.certs import SERVING_VALIDITY
from sj_operator.kube import Conflict, KubeError, NotFound
from sj_operator.webhook import (
    ADOPTION_CONFIGURATION_NAME,
    CONFIGURATION_NAME,
    FAILURE_POLICY,
    WebhookServer,
    adoption_configuration,
    webhook_configuration,
)


class FakeKube:
    """The calls the webhook makes, kept in memory with resourceVersions like the API server's. The webhook
    configurations exist as the chart (or, outside a cluster, the harness) makes them, without a caBundle."""

    def __init__(self, port: int = 0, *, configurations: bool = True) -> None:
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        url = f"https://127.0.0.1:{port}"
        made = (webhook_configuration(service=None, url=url), adoption_configuration(service=None, url=url))
        self.configurations: dict[str, dict[str, Any]] = (
            {c["metadata"]["name"]: c for c in made} if configurations else {})
        self.patches: list[tuple[str, str, str, str]] = []
        self.patch_error: KubeError | None = None
        self.on_patch: list[Any] = []
        self.before_write: list[Any] = []

    async def read_secret(self, namespace: str, name: str) -> Any:
        stored = self.secrets.get((namespace, name))
        if stored is None:
            raise NotFound(404, "NotFound")
        return SimpleNamespace(data=dict(stored["data"]),
                               metadata=SimpleNamespace(resource_version=stored["metadata"]["resourceVersion"]))

    async def _write(self, secret: dict[str, Any], *, create: bool) -> None:
        while self.before_write:
            await self.before_write.pop(0)()
        meta = secret["metadata"]
        key = (meta["namespace"], meta["name"])
        stored = self.secrets.get(key)
        if create and stored is not None:
            raise Conflict(409, "AlreadyExists")
        if not create and (stored is None or stored["metadata"]["resourceVersion"] != meta.get("resourceVersion")):
            raise Conflict(409, "Conflict")
        self.version += 1
        self.secrets[key] = {**secret, "metadata": {**meta, "resourceVersion": str(self.version)}}

    async def create_secret(self, secret: dict[str, Any]) -> None:
        await self._write(secret, create=True)

    async def replace_secret(self, secret: dict[str, Any]) -> None:
        await self._write(secret, create=False)

    async def patch_ca_bundle(self, kind: str, name: str, webhook: str, ca_bundle: str) -> None:
        for hook in self.on_patch:
            hook()
        if self.patch_error is not None:
            raise self.patch_error
        configuration = self.configurations.get(name)
        if configuration is None:
            raise NotFound(404, "NotFound")
        assert configuration["kind"] == f"{kind.capitalize()}WebhookConfiguration"
        [hook] = [h for h in configuration["webhooks"] if h["name"] == webhook]
        hook["clientConfig"]["caBundle"] = ca_bundle
        self.patches.append((kind, name, webhook, ca_bundle))


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Clock:
    """Starts at the real time: the TLS client checks validity against the real clock."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


def server(kube: FakeKube, clock: Clock, port: int = 0) -> WebhookServer:
    return WebhookServer(kube, port=port or _port(), hosts=["127.0.0.1"], service=None,  # type: ignore[arg-type]
                         url=f"https://127.0.0.1:{port}", secret_namespace="ops",
                         secret_name="tls", limits=DEFAULT_LIMITS, clock=clock, refresh=timedelta(hours=1))


def trusted_by_api_server(kube: FakeKube, name: str = CONFIGURATION_NAME) -> ssl.SSLContext:
    """A client context trusting exactly the CAs the configuration carries."""
    bundle = base64.b64decode(kube.configurations[name]["webhooks"][0]["clientConfig"]["caBundle"])
    context = ssl.create_default_context(cadata=bundle.decode())
    return context


async def post(port: int, context: ssl.SSLContext, body: Any,
               path: str = VALIDATE_PATH) -> tuple[int, Any, x509.Certificate]:
    """POST over a new TLS connection verified with ``context``; also returns the certificate served."""
    async with aiohttp.ClientSession() as session, session.post(
            f"https://127.0.0.1:{port}{path}", json=body, ssl=context) as response:
        status, answer = response.status, await response.json()
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    peer = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return status, answer, x509.load_der_x509_certificate(peer)


@contextlib.contextmanager
def running(webhook: WebhookServer) -> Iterator[asyncio.Task[None]]:
    task = asyncio.get_event_loop().create_task(webhook.run())
    try:
        yield task
    finally:
        task.cancel()


def review_of(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-7", "operation": "CREATE", "object": {"spec": spec}}}


async def _started(port: int) -> None:
    for _ in range(200):
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the webhook did not start listening")


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[tuple[FakeKube, Clock, int, WebhookServer]]:
    """A webhook listening on a free loopback port, its first certificates made and registered."""
    clock, port = Clock(), _port()
    kube = FakeKube(port)
    webhook = server(kube, clock, port)
    with running(webhook):
        await _started(port)
        yield kube, clock, port, webhook


def test_it_answers_over_tls_trusted_by_the_registered_ca_bundle() -> None:
    async def scenario() -> None:
        async with serving() as (kube, _, port, _):
            context = trusted_by_api_server(kube)
            code, answer, _ = await post(port, context, review_of({"image": "x", "duration": "5s"}))
            assert code == 200
            assert answer["response"]["uid"] == "u-7" and answer["response"]["allowed"] is False
            assert answer["response"]["status"]["message"].startswith("spec.duration: must be at least 10s")
            code, answer, _ = await post(port, context, review_of({"image": "x"}))
            assert answer["response"]["allowed"] is True
            code, answer, _ = await post(port, context, {"not": "a review"})
            assert code == 400
        configuration = kube.configurations[CONFIGURATION_NAME]
        hook = configuration["webhooks"][0]
        assert hook["failurePolicy"] == FAILURE_POLICY == "Ignore" and hook["timeoutSeconds"] == 5
        assert hook["clientConfig"]["url"] == f"https://127.0.0.1:{port}{VALIDATE_PATH}"
        assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
        assert hook["rules"][0]["resources"] == ["scavengerjobs"], "status writes never go through it"

    asyncio.run(scenario())


def test_labelled_jobs_are_suspended_for_adoption_over_the_same_tls() -> None:
    async def scenario() -> None:
        async with serving() as (kube, _, port, _):
            context = trusted_by_api_server(kube, ADOPTION_CONFIGURATION_NAME)
            job = {"metadata": {"name": "j", "labels": {"scavenger.dev/scavenge": "true"}},
                   "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}
            review = {"request": {"uid": "u-8", "operation": "CREATE", "object": job}}
            code, answer, _ = await post(port, context, review, path=MUTATE_PATH)
            assert code == 200 and answer["response"]["allowed"] is True
            assert json.loads(base64.b64decode(answer["response"]["patch"])) == [
                {"op": "add", "path": "/spec/suspend", "value": True},
                {"op": "add", "path": "/spec/managedBy", "value": "scavenger.dev/operator"}]
            job["spec"]["activeDeadlineSeconds"] = 60
            code, answer, _ = await post(port, context, review, path=MUTATE_PATH)
            assert answer["response"]["allowed"] is False
            assert answer["response"]["status"]["message"].startswith("spec.activeDeadlineSeconds: ")
        configuration = kube.configurations[ADOPTION_CONFIGURATION_NAME]
        hook = configuration["webhooks"][0]
        assert configuration["kind"] == "MutatingWebhookConfiguration"
        assert hook["failurePolicy"] == "Fail" and hook["timeoutSeconds"] == 5
        assert hook["objectSelector"] == {"matchLabels": {"scavenger.dev/scavenge": "true"}}
        assert hook["clientConfig"]["url"] == f"https://127.0.0.1:{port}{MUTATE_PATH}"
        assert hook["rules"][0]["resources"] == ["jobs"] and hook["rules"][0]["operations"] == ["CREATE"]

    asyncio.run(scenario())


def test_adoption_is_limited_to_the_namespaces_handled() -> None:
    hook = adoption_configuration(ca_bundle=b"CA", service="ops/hook", url=None, namespaces=("a", "b"))["webhooks"][0]
    assert hook["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}]}
    assert hook["clientConfig"]["service"]["path"] == MUTATE_PATH
    assert "namespaceSelector" not in adoption_configuration(ca_bundle=b"CA", service=None, url="https://h:1")[
        "webhooks"][0]


def test_a_renewed_certificate_is_served_without_a_restart() -> None:
    async def scenario() -> None:
        async with serving() as (kube, clock, port, webhook):
            _, _, first = await post(port, trusted_by_api_server(kube), review_of({"image": "x"}))
            # The Secret is lost (or a new CA wanted): the next refresh makes and serves a new bundle.
            kube.secrets.clear()
            clock.now += timedelta(minutes=1)
            await webhook.refresh_once()
            _, answer, second = await post(port, trusted_by_api_server(kube), review_of({"image": "x"}))
            assert answer["response"]["allowed"] is True
            assert second.serial_number != first.serial_number
            assert second.not_valid_after_utc == (clock.now + SERVING_VALIDITY).replace(microsecond=0)

    asyncio.run(scenario())


def test_replicas_racing_to_make_the_certificate_share_one() -> None:
    async def scenario() -> None:
        kube, clock = FakeKube(), Clock()
        one, other = server(kube, clock), server(kube, clock)

        async def other_replica_first() -> None:
            await other.refresh_once()
        kube.before_write.append(other_replica_first)  # `other` writes between `one`'s read and write
        await one.refresh_once()
        assert one.bundle == other.bundle
        assert len(kube.secrets) == 1 and kube.version == 1, "the loser took the winner's Secret"

    asyncio.run(scenario())


def test_the_service_form_points_the_api_server_at_the_service() -> None:
    configuration = webhook_configuration(ca_bundle=b"CA", service="scavenger-system/scavenger-webhook", url=None)
    client_config = configuration["webhooks"][0]["clientConfig"]
    assert client_config["service"] == {"namespace": "scavenger-system", "name": "scavenger-webhook",
                                        "path": VALIDATE_PATH, "port": 443}
    assert "url" not in client_config and base64.b64decode(client_config["caBundle"]) == b"CA"


@pytest.mark.parametrize("service", ["scavenger-system/scavenger-webhook"])
def test_service_hosts_cover_the_names_the_api_server_dials(service: str) -> None:
    from sj_operator.webhook import webhook_hosts
    hosts = webhook_hosts(service, None, cluster_domain="corp.example")
    assert "scavenger-webhook.scavenger-system.svc" in hosts
    assert "scavenger-webhook.scavenger-system.svc.corp.example" in hosts, "the cluster's own domain"
    assert not any(h.endswith("cluster.local") for h in hosts)
    assert webhook_hosts(None, "192.0.2.2", cluster_domain="cluster.local") == ["192.0.2.2"]


async def refreshed() -> tuple[FakeKube, WebhookServer]:
    """A webhook (not serving) after its first refresh: its certificate made, stored and trusted."""
    kube = FakeKube()
    webhook = server(kube, Clock())
    await webhook.refresh_once()
    return kube, webhook


def test_only_the_ca_bundle_of_each_configuration_is_patched_by_name() -> None:
    async def scenario() -> None:
        kube, _ = await refreshed()
        bundle = kube.secrets[("ops", "tls")]["data"]["ca.crt"]  # the Secret's base64 is the caBundle's
        assert kube.patches == [
            ("validating", "scavengerjobs.scavenger.dev", "validate.scavengerjobs.scavenger.dev", bundle),
            ("mutating", "jobs.scavenger.dev", "adopt.jobs.scavenger.dev", bundle)]

    asyncio.run(scenario())


def test_no_ca_key_is_written_and_one_written_before_is_replaced_at_once() -> None:
    async def scenario() -> None:
        kube, webhook = await refreshed()
        stored = kube.secrets[("ops", "tls")]
        assert set(stored["data"]) == {"ca.crt", "tls.crt", "tls.key"}
        assert b"PRIVATE KEY" not in base64.b64decode(stored["data"]["ca.crt"])
        # A Secret of an older operator: the same good certificate, and its CA's key beside it.
        first = webhook.bundle
        stored["data"]["ca.key"] = base64.b64encode(b"-----BEGIN PRIVATE KEY-----\n...").decode()
        other = server(kube, Clock())
        await other.refresh_once()
        assert "ca.key" not in kube.secrets[("ops", "tls")]["data"]
        assert other.bundle != first and other.bundle is not None
        assert first is not None and first.ca_bundle not in other.bundle.ca_bundle, \
            "the CA whose key was stored is trusted no more"

    asyncio.run(scenario())


def test_the_api_server_trusts_a_new_ca_before_its_certificate_is_served() -> None:
    async def scenario() -> None:
        kube, webhook = await refreshed()
        first = webhook.bundle
        served_while_patched: list[Any] = []
        kube.on_patch.append(lambda: served_while_patched.append(webhook.bundle))
        kube.secrets.clear()  # lost: the next refresh makes a new CA and certificate
        await webhook.refresh_once()
        assert served_while_patched == [first, first], "the old certificate served until both trust the new CA"
        assert webhook.bundle != first

    asyncio.run(scenario())


def test_a_failed_patch_keeps_the_certificate_the_api_server_trusts() -> None:
    async def scenario() -> None:
        kube, webhook = await refreshed()
        first = webhook.bundle
        kube.secrets.clear()
        kube.patch_error = KubeError(403, "Forbidden", "cannot patch")
        with pytest.raises(KubeError):
            await webhook.refresh_once()
        assert webhook.bundle == first
        kube.patch_error = None
        await webhook.refresh_once()
        assert webhook.bundle != first

    asyncio.run(scenario())


def test_a_missing_configuration_is_logged_and_looked_for_again_while_the_webhook_serves(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    import sj_operator.webhook as webhook_module
    monkeypatch.setattr(webhook_module, "MISSING_RETRY", timedelta(milliseconds=50))

    async def scenario() -> None:
        port = _port()
        kube, clock = FakeKube(port, configurations=False), Clock()
        webhook = server(kube, clock, port)
        with running(webhook):
            await _started(port)
            assert webhook.missing == (CONFIGURATION_NAME, ADOPTION_CONFIGURATION_NAME)
            assert kube.patches == [] and not kube.configurations, "nothing is created"
            # The chart's configurations appear: the next try sets their caBundle.
            kube.configurations = FakeKube(port).configurations
            for _ in range(100):
                if len(kube.patches) == 2:
                    break
                await asyncio.sleep(0.02)
            context = trusted_by_api_server(kube)
            code, answer, _ = await post(port, context, review_of({"image": "x"}))
            assert code == 200 and answer["response"]["allowed"] is True
            assert webhook.missing == ()

    with caplog.at_level("INFO", logger="sj_operator.webhook"):
        asyncio.run(scenario())
    messages = [r.getMessage() for r in caplog.records]
    assert sum("not found" in m for m in messages) == 2, "each missing configuration is told of once"
    assert any("scavengerjobs.scavenger.dev found" in m for m in messages)
