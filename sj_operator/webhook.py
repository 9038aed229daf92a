"""The admission webhooks: an HTTPS server every replica runs, with certificates it keeps itself.

On start and every ``REFRESH`` the replica reads the shared Secret, renews what is due
(:mod:`sj_operator.certs`; replicas race with resourceVersions, the loser takes the winner's), sets the
current CAs as the ``caBundle`` of its two webhook configurations, and then loads the serving pair into
its TLS context (new connections get it at once, no restart): the API server trusts a new certificate's CA
before any connection is served with it. Answers come from :func:`admission.review` and
:func:`adoption.mutate_review`.

The configurations themselves ship in the Helm chart (deploy/chart/templates/webhooks.yaml, kept equal
to `webhook_configuration` and `adoption_configuration` by ``tests/unit/test_chart.py``), so the operator
never creates one and ``helm uninstall`` removes them; it may only patch their ``caBundle``, by name. A
configuration that is missing is logged and looked for again at the next refresh (every `MISSING_RETRY`
while one is missing); outside a cluster (``url``), whoever runs the operator creates them
(`webhook_configuration`, `adoption_configuration`: the e2e harness does).

The configuration's failure policy is ``Ignore``: SJs can be submitted while no replica answers (an
upgrade, a crash), and the decision loop applies the same validation, so an SJ that slips in then is
set ``Failed`` naming the same field. Its timeout is 5 s, well under the API server's own 10 s.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal

from aiohttp import web

from sj_operator.admission import VALIDATE_PATH, review
from sj_operator.adoption import MUTATE_PATH, mutate_review
from sj_operator.api import SpecLimits
from sj_operator.certs import TLSBundle, not_after, renew, renewal_due
from sj_operator.kube import Conflict, Kube, KubeError, NotFound
from sj_operator.names import GROUP, LABEL_SCAVENGE, MANAGED_BY, PLURAL

log = logging.getLogger(__name__)

CONFIGURATION_NAME: Final = f"{PLURAL}.{GROUP}"
WEBHOOK_NAME: Final = f"validate.{PLURAL}.{GROUP}"
TIMEOUT_SECONDS: Final = 5
FAILURE_POLICY: Final = "Ignore"
ADOPTION_CONFIGURATION_NAME: Final = f"jobs.{GROUP}"
ADOPTION_WEBHOOK_NAME: Final = f"adopt.jobs.{GROUP}"
ADOPTION_FAILURE_POLICY: Final = "Fail"
"""Only Jobs labelled for adoption are sent (an object selector): while no replica answers, creating
such a Job fails instead of letting it run unsuspended at its own priority."""
REFRESH: Final = timedelta(minutes=10)
MISSING_RETRY: Final = timedelta(seconds=30)
"""How soon a refresh is tried again while a webhook configuration is missing (being installed)."""
_SECRET_KEYS: Final = {"ca_bundle": "ca.crt", "cert": "tls.crt", "key": "tls.key"}
_LEGACY_CA_KEY: Final = "ca.key"
"""Where a Secret written before 0.2 kept its CA's private key: such a Secret is renewed at once."""
CONFIGURATIONS: Final[tuple[tuple[Literal["validating", "mutating"], str, str], ...]] = (
    ("validating", CONFIGURATION_NAME, WEBHOOK_NAME),
    ("mutating", ADOPTION_CONFIGURATION_NAME, ADOPTION_WEBHOOK_NAME))
"""The webhook configurations whose ``caBundle`` the operator sets: (kind, name, webhook)."""


def _client_config(ca_bundle: bytes | None, service: str | None, url: str | None, path: str) -> dict[str, Any]:
    """Where the API server sends reviews: the Service, or ``url`` (scheme, host and port) outside a cluster;
    with the CAs it trusts there (none yet: the operator sets them)."""
    client_config: dict[str, Any] = {} if ca_bundle is None else {"caBundle": base64.b64encode(ca_bundle).decode()}
    if service is not None:
        namespace, name = service.split("/", 1)
        client_config["service"] = {"namespace": namespace, "name": name, "path": path, "port": 443}
    else:
        client_config["url"] = f"{url}{path}"
    return client_config


def adoption_configuration(*, ca_bundle: bytes | None = None, service: str | None, url: str | None,
                           namespaces: tuple[str, ...] = ()) -> dict[str, Any]:
    """The MutatingWebhookConfiguration sending the creates of Jobs labelled for adoption (in the
    namespaces this operator handles) to this operator."""
    webhook: dict[str, Any] = {
        "reinvocationPolicy": "Never",
        "rules": [{"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["jobs"],
                   "scope": "Namespaced"}],
        "objectSelector": {"matchLabels": {LABEL_SCAVENGE: "true"}},
    }
    if namespaces:
        webhook["namespaceSelector"] = {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(namespaces)}]}
    return _configuration("MutatingWebhookConfiguration", ADOPTION_CONFIGURATION_NAME, ADOPTION_WEBHOOK_NAME,
                          ADOPTION_FAILURE_POLICY, _client_config(ca_bundle, service, url, MUTATE_PATH), webhook)


def webhook_configuration(*, ca_bundle: bytes | None = None, service: str | None, url: str | None) -> dict[str, Any]:
    """The ValidatingWebhookConfiguration sending SJ creates and updates to this operator."""
    rules = [{"apiGroups": [GROUP], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
              "resources": [PLURAL], "scope": "Namespaced"}]
    return _configuration("ValidatingWebhookConfiguration", CONFIGURATION_NAME, WEBHOOK_NAME, FAILURE_POLICY,
                          _client_config(ca_bundle, service, url, VALIDATE_PATH), {"rules": rules})


def _configuration(kind: str, name: str, webhook: str, failure_policy: str, client_config: dict[str, Any],
                   rest: dict[str, Any]) -> dict[str, Any]:
    """A webhook configuration of one webhook; what every one of the operator's shares is set here."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "webhooks": [{
            "name": webhook,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": failure_policy,
            "timeoutSeconds": TIMEOUT_SECONDS,
            "matchPolicy": "Equivalent",
            **rest,
            "clientConfig": client_config,
        }],
    }


def bundle_from_secret(secret: Any) -> TLSBundle | None:
    """The bundle a Secret holds; None when it is incomplete, unreadable, or still holds a CA's key."""
    data = getattr(secret, "data", None) or {}
    if _LEGACY_CA_KEY in data:
        return None
    try:
        return TLSBundle(**{field: base64.b64decode(data[key]) for field, key in _SECRET_KEYS.items()})
    except (KeyError, ValueError, TypeError):
        return None


def secret_of(bundle: TLSBundle, *, namespace: str, name: str, resource_version: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": metadata,
        "data": {key: base64.b64encode(getattr(bundle, field)).decode() for field, key in _SECRET_KEYS.items()},
    }


class WebhookServer:
    """Serves :data:`VALIDATE_PATH` and ``/healthz`` over HTTPS and keeps its certificates current."""

    def __init__(self, kube: Kube, *, port: int, hosts: list[str], service: str | None, url: str | None,
                 secret_namespace: str, secret_name: str, limits: SpecLimits,
                 clock: Callable[[], datetime], refresh: timedelta = REFRESH,
                 namespaces: tuple[str, ...] = ()) -> None:
        """``url``: scheme, host and port the API server reaches this server at when not through ``service``;
        ``namespaces``: where Jobs are adopted (empty: everywhere)."""
        self.kube, self.port, self.hosts, self.namespaces = kube, port, hosts, namespaces
        self.service, self.url = service, url
        self.secret_namespace, self.secret_name = secret_namespace, secret_name
        self.limits, self.clock, self.refresh = limits, clock, refresh
        self.bundle: TLSBundle | None = None
        self.missing: tuple[str, ...] = ()
        """The webhook configurations found missing at the last refresh."""
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._runner: web.AppRunner | None = None

    async def run(self) -> None:
        """Serve until cancelled; certificate trouble is logged and retried, never fatal."""
        while self.bundle is None:
            await self._refresh_logged()
            if self.bundle is None:
                await asyncio.sleep(5)
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_post(VALIDATE_PATH, self._answering(review, "ScavengerJob"))
        app.router.add_post(MUTATE_PATH, self._answering(mutate_review, "Job"))
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host="0.0.0.0", port=self.port, ssl_context=self.context).start()
        log.info("admission webhook serving on :%d (certificate valid until %s)", self.port,
                 not_after(self.bundle.cert).isoformat())
        try:
            while True:
                await asyncio.sleep((MISSING_RETRY if self.missing else self.refresh).total_seconds())
                await self._refresh_logged()
        finally:
            await self._runner.cleanup()

    async def _refresh_logged(self) -> None:
        try:
            await self.refresh_once()
        except (KubeError, ValueError, OSError) as exc:
            log.warning("webhook certificates: %s; retrying", exc)

    async def refresh_once(self) -> None:
        """Read (and renew when due) the shared bundle, have the API server trust it, and load it."""
        bundle = await self._shared_bundle()
        await self._trust(bundle)
        if bundle != self.bundle:
            self._load(bundle)
            self.bundle = bundle

    async def _trust(self, bundle: TLSBundle) -> None:
        """Sets the bundle's CAs as the ``caBundle`` of each webhook configuration. One that is missing
        (not installed yet, or deleted) is logged and tried again: no request comes through it meanwhile.
        Any other failure is raised before the new certificate is loaded, so this replica goes on serving
        the one the API server trusts."""
        ca_bundle, missing = base64.b64encode(bundle.ca_bundle).decode(), []
        for kind, name, webhook in CONFIGURATIONS:
            try:
                await self.kube.patch_ca_bundle(kind, name, webhook, ca_bundle)
            except NotFound:
                missing.append(name)
                if name not in self.missing:
                    log.warning("%s webhook configuration %s not found: it is installed by the chart "
                                "(webhook.enabled) or, outside a cluster, by whoever runs the operator; "
                                "trying again every %ss", kind, name, int(MISSING_RETRY.total_seconds()))
            else:
                if name in self.missing:
                    log.info("%s webhook configuration %s found: it trusts the current CAs", kind, name)
        self.missing = tuple(missing)

    async def _shared_bundle(self) -> TLSBundle:
        for _ in range(5):
            try:
                secret = await self.kube.read_secret(self.secret_namespace, self.secret_name)
            except NotFound:
                secret = None
            current = bundle_from_secret(secret) if secret is not None else None
            now = self.clock()
            if current is not None and not renewal_due(current, self.hosts, now):
                return current
            if secret is not None and _LEGACY_CA_KEY in (secret.data or {}):
                log.warning("Secret %s/%s holds a CA private key (written before 0.2): replaced by a new CA "
                            "whose key is not kept, and the old CA no longer trusted", self.secret_namespace,
                            self.secret_name)
            renewed = renew(current, self.hosts, now)
            version = secret.metadata.resource_version if secret is not None else None
            body = secret_of(renewed, namespace=self.secret_namespace, name=self.secret_name,
                             resource_version=version)
            try:
                await (self.kube.replace_secret(body) if secret is not None else self.kube.create_secret(body))
            except Conflict:
                continue  # another replica renewed first: take theirs
            log.info("webhook certificate renewed for %s (valid until %s)", ", ".join(self.hosts),
                     not_after(renewed.cert).isoformat())
            return renewed
        raise ValueError(f"Secret {self.secret_namespace}/{self.secret_name} kept changing while being renewed")

    def _load(self, bundle: TLSBundle) -> None:
        # load_cert_chain reads files only; they live for this call and are private to the process.
        with tempfile.TemporaryDirectory(prefix="sj-webhook-") as tmp:
            cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert.write_bytes(bundle.cert)
            key.touch(mode=0o600)
            key.write_bytes(bundle.key)
            self.context.load_cert_chain(cert, key)

    def _answering(self, decide: Callable[[Any, SpecLimits], dict[str, Any]],
                   what: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        """A handler answering AdmissionReviews with ``decide``; refusals and changes are logged."""
        async def answer(request: web.Request) -> web.Response:
            try:
                body = await request.json()
                review_answer = decide(body, self.limits)
            except ValueError as exc:
                return web.json_response({"error": str(exc)}, status=400)
            asked, response = body["request"], review_answer["response"]
            where = f"{what} {asked.get('namespace')}/{asked.get('name')}"
            if not response["allowed"]:
                log.info("refused %s %s: %s", asked.get("operation"), where, response["status"]["message"])
            elif "patch" in response:
                log.info("%s suspended for adoption", where)
            return web.json_response(review_answer)
        return answer

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")


def webhook_hosts(service: str | None, host: str | None, *, cluster_domain: str) -> list[str]:
    """The names the serving certificate is for: the Service's DNS names (its full name in ``cluster_domain``,
    the operator's ``--cluster-domain``), or the given host."""
    if service is not None:
        namespace, name = service.split("/", 1)
        return [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.{cluster_domain}", f"{name}.{namespace}"]
    assert host is not None
    return [host]
