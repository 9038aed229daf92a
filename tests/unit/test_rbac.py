"""Least privilege, proven: the chart's RBAC grants exactly what the operator's API calls need.

Four steps, each against the code rather than a list kept by hand:

1. Every `Kube` method is run against a recording API server (answering as the API server would: the
   object, ``AlreadyExists``, ``NotFound``), and the RBAC attributes of each request it sent (the API
   server's own reading of a path: group, resource, verb) must be exactly what the method declares
   (`kube.ACCESS`, through ``@needs``).
2. The operator's modules are read (AST) for the `Kube` methods they call: what is needed is what those
   declare, plus the watch caches' lists and watches (`caches.py`) and kopf's (its registry: the indexed
   and watched resources; the CRDs it watches for resources that come and go; the Events it posts).
   A permission on one object of the operator's own (its Lease, its webhook's Secret and configurations)
   may only be used by the module that owns that object, with the names the chart's Deployment leaves at
   their defaults.
3. The chart is rendered (`helm template`) and its ClusterRole and Role rules, flattened to (role, group,
   resource, verb, resourceName), must equal what is needed: a verb granted that no call uses fails, and
   so does a call that no rule allows.
"""
from __future__ import annotations

import ast
import asyncio
import contextlib
import functools
import inspect
import json
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import kopf
import pytest
from aiohttp import web

import sj_operator.handlers
from sj_operator import caches
from sj_operator.builders.service import SLICE_MANAGER
from sj_operator.config import OperatorConfig
from sj_operator.kube import ACCESS, APPLIED_KINDS, CHILD_PATHS, Access, EventRef, Kube, KubeError
from sj_operator.names import GROUP, PLURAL, VERSION
from sj_operator.webhook import ADOPTION_CONFIGURATION_NAME, CONFIGURATION_NAME
from tests.unit.chart import REPO, of_kind, render
from tests.unit.test_kube import ApiServer, Request

SJ = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ScavengerJob", "metadata": {"name": "s", "namespace": "a"}}
NAMED = {"metadata": {"name": "x", "namespace": "a"}}
SAMPLES: dict[str, Callable[[Kube], Awaitable[Any]]] = {
    "list_raw": lambda k: k.list_raw(caches.PODS_PATH),
    "watch_raw": lambda k: _drain(k.watch_raw(caches.PODS_PATH, "1")),
    "close": lambda k: k.close(),
    "create_or_keep": lambda k: k.create_or_keep(lambda: asyncio.sleep(0)),
    "read_lease": lambda k: k.read_lease("ops", "scavenger"),
    "create_lease": lambda k: k.create_lease("ops", NAMED),
    "replace_lease": lambda k: k.replace_lease("ops", "scavenger", NAMED),
    "patch_lease": lambda k: k.patch_lease("ops", "scavenger", {"spec": {}}),
    "patch_sj_status": lambda k: k.patch_sj_status("a", "s", {"phase": "Running"}, "7"),
    "create_child": lambda k: _each(*(k.create_child({**NAMED, "kind": kind}, "u") for kind in CHILD_PATHS)),
    "read_child": lambda k: _each(*(k.read_child(kind, "a", "x") for kind in CHILD_PATHS)),
    "apply_child": lambda k: _each(*(k.apply_child({**NAMED, "kind": kind}, "u", {"data": {}}, version=version)
                                     for kind in APPLIED_KINDS for version in (None, "1"))),
    "patch_child": lambda k: _each(*(k.patch_child(kind, "a", "x", {"data": {}}, "1") for kind in APPLIED_KINDS)),
    "delete_child": lambda k: _each(k.delete_child("Job", "a", "x", "x-uid"),
                                    k.delete_child("Service", "a", "x", "x-uid"),
                                    k.delete_child("EndpointSlice", "a", "x", "x-uid")),
    "delete_owned": lambda k: _each(k.delete_owned("Job", "a", "x", "u"), k.delete_owned("Service", "a", "x", "u"),
                                    k.delete_owned("EndpointSlice", "a", "x", "u")),
    "exists": lambda k: _each(*(k.exists(kind, "a", "x") for kind in ("persistentVolumeClaim", "configMap", "secret"))),
    "read_secret": lambda k: k.read_secret("ops", "tls"),
    "create_secret": lambda k: k.create_secret({"metadata": {"name": "tls", "namespace": "ops"}}),
    "replace_secret": lambda k: k.replace_secret({"metadata": {"name": "tls", "namespace": "ops"}}),
    "patch_ca_bundle": lambda k: _each(k.patch_ca_bundle("validating", "v", "w", "Q0E="),
                                       k.patch_ca_bundle("mutating", "m", "w", "Q0E=")),
    "create_sj": lambda k: k.create_sj(SJ),
    "patch_job_status": lambda k: k.patch_job_status("a", "x", {"succeeded": 1}),
    "dry_run_pod": lambda k: k.dry_run_pod(NAMED),
    "label_pod": lambda k: k.label_pod("a", "x", {"scavenger.dev/protected": "true"}),
    "ensure_priority_class": lambda k: k.ensure_priority_class({"metadata": {"name": "x"}}),
    "event": lambda k: _each(*(k.event(namespace="a", name="s", uid="u", kind="ScavengerJob", api_version="v",
                                       type_="Normal", reason="R", message="m", named=named)
                               for named in (False, True))),
    "update_event": lambda k: k.update_event("a", EventRef("s.1", "e"), count=2,
                                             last=datetime(2026, 1, 1, tzinfo=UTC), message="m"),
}
"""A call of each `Kube` method, with arguments enough for it to send its requests."""
ANSWERS = {
    "found": {},
    "already there": {"POST": 409},
    "missing": {"GET": 404, "PUT": 404, "PATCH": 404, "DELETE": 404},
}
"""The API server's answers a method is run against, so that each of its paths sends its requests:
(HTTP method: status) where not 200."""
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
NAMEABLE = {"get", "update", "patch", "delete"}
"""The verbs RBAC can limit to resourceNames (a create's, list's or watch's request names no object)."""
OWNERS = {"own lease": {"leader"}, "own webhook secret": {"webhook"}, "own webhook configuration": {"webhook"},
          "own namespace": {"leader", "webhook"}}
"""Which module may use a permission on the operator's own objects or namespace."""
KOPF_OWN = (Access("apiextensions.k8s.io", "customresourcedefinitions", "list"),
            Access("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
            Access("", "events", "create"))
"""What kopf needs whatever it handles: it watches the CRDs (its scanning) and posts Events."""


async def _each(*calls: Awaitable[Any]) -> None:
    """Each call in turn, whether the one before failed or not."""
    for call in calls:
        with contextlib.suppress(KubeError):
            await call


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


class RecordingApiServer(ApiServer):
    """Answers every request with ``answers`` (by HTTP method; 200 otherwise) in the shape the client
    decodes: a list, a watch stream (empty), an object."""

    def __init__(self, answers: dict[str, int]) -> None:
        super().__init__()
        self.by_method = answers

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.requests.append(Request(request.method, request.path, dict(request.query),
                                     request.headers.get("Content-Type", ""), "", json.loads(raw) if raw else None))
        status = self.by_method.get(request.method, 200)
        if status != 200:
            return web.json_response({"kind": "Status", "code": status, "message": "m"}, status=status)
        if "watch" in request.query:
            return web.Response(text="")
        if request.method == "GET" and _attributes(request.method, request.path, dict(request.query))[3] is None:
            return web.json_response({"items": [], "metadata": {"resourceVersion": "1"}})
        # An object of the SJ of uid "u" (what a read of an SJ's child finds: its own, so deleted and reused).
        owner = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ScavengerJob", "name": "s", "uid": "u",
                 "controller": True}
        return web.json_response({"metadata": {"name": "x", "uid": "x-uid", "resourceVersion": "1",
                                               "ownerReferences": [owner]}})


def _attributes(method: str, path: str, query: dict[str, str]) -> tuple[str, str, str, str | None]:
    """(group, resource, verb, name) as the API server reads a request for RBAC: ``/api/v1/...`` is the core
    group, ``/apis/GROUP/VERSION/...`` another; ``namespaces/NS/`` before a resource names its namespace;
    a third part is a subresource (``jobs/status``). A GET of a name is a get, of a collection a list, and
    with ``watch`` a watch."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else None
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    verb = ("watch" if query.get("watch") else "get" if name else "list") if method == "GET" else VERBS[method]
    return group, resource, verb, name


@functools.cache
def _requests() -> dict[str, set[tuple[str, str, str, str | None]]]:
    """The RBAC attributes of every request each method sends, whatever the API server answers: every
    method is run once per kind of answer, one after the other, against one server per kind."""
    seen: dict[str, set[tuple[str, str, str, str | None]]] = defaultdict(set)
    for answers in ANSWERS.values():
        server = RecordingApiServer(answers)

        async def use(kube: Kube, server: RecordingApiServer = server) -> None:
            for method, sample in SAMPLES.items():
                before = len(server.requests)
                with contextlib.suppress(KubeError):
                    await sample(kube)
                seen[method] |= {_attributes(r.method, r.path, r.query) for r in server.requests[before:]}

        with server:
            asyncio.run(server.run(use, server.kube(attempts=1)))
    return seen


def _kube_methods() -> list[str]:
    return sorted(name for name, member in inspect.getmembers(Kube)
                  if not name.startswith("_")
                  and (inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)))


def test_every_kube_method_declares_what_it_needs_and_has_a_sample() -> None:
    methods = _kube_methods()
    assert sorted(ACCESS) == methods, "a Kube method without @needs (or a declaration of no method)"
    assert sorted(SAMPLES) == methods


@pytest.mark.parametrize("method", sorted(SAMPLES))
def test_a_methods_requests_need_exactly_what_it_declares(method: str) -> None:
    sent = _requests()[method]
    declared = {(a.group, a.resource, a.verb) for a in ACCESS[method]}
    if method in ("list_raw", "watch_raw"):  # the path is the caller's: the watch caches' (below)
        declared = {("", "pods", "list" if method == "list_raw" else "watch")}
    assert {(group, resource, verb) for group, resource, verb, _ in sent} == declared
    named = [a for a in ACCESS[method] if a.where.startswith("own ") and a.where != "own namespace"]
    assert all(a.verb in NAMEABLE for a in named), "RBAC cannot limit this verb to a name"
    assert all(name is not None for group, resource, verb, name in sent if verb in NAMEABLE)


def _uses() -> dict[str, set[str]]:
    """The `Kube` methods the operator's modules call (``kube.X(...)``, ``self.kube.X(...)``), each with
    the modules calling it."""
    uses: dict[str, set[str]] = defaultdict(set)
    for path in sorted((REPO / "sj_operator").rglob("*.py")):
        if path.name == "kube.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ACCESS
                    and ast.unparse(node.func.value).split(".")[-1] == "kube"):
                uses[node.func.attr].add(path.stem)
    return uses


def _kopf_needs() -> set[Access]:
    registry = kopf.get_default_registry()
    assert not registry._changing.get_all_handlers() and not registry._webhooks.get_all_handlers(), \
        "kopf's change handlers patch what they handle (finalizers, annotations): not granted"
    needs = set(KOPF_OWN)
    for handler in [*registry._indexing.get_all_handlers(), *registry._watching.get_all_handlers()]:
        selector = handler.selector
        assert selector is not None
        resource = selector.plural or selector.any_name
        assert isinstance(resource, str) and selector.group is not None
        needs |= {Access(selector.group, resource, "list"), Access(selector.group, resource, "watch")}
    return needs


def _cache_needs() -> set[Access]:
    paths = {caches.PODS_PATH, caches.JOBS_PATH, caches.RESOURCE_QUOTAS_PATH, caches.SJS_PATH}
    # Each is a cache's path in handlers.startup: the pod and Job caches' by default, the others given.
    assert caches.PodCache.__dataclass_fields__["path"].default == caches.PODS_PATH
    assert caches.ObjectCache.__dataclass_fields__["path"].default == caches.JOBS_PATH
    startup = inspect.getsource(sj_operator.handlers.startup)
    assert "path=SJS_PATH" in startup and "path=RESOURCE_QUOTAS_PATH" in startup
    needs = set()
    for path in paths:
        group, resource, _, _ = _attributes("GET", path, {})
        needs |= {Access(group, resource, "list"), Access(group, resource, "watch")}
    return needs


def test_the_owned_objects_permissions_are_used_only_by_their_owners_with_the_charts_names() -> None:
    uses = _uses()
    for method, accesses in ACCESS.items():
        for a in accesses:
            if a.where != "anywhere":
                assert uses[method] <= OWNERS[a.where], f"{method} ({a.where}) used by {uses[method]}"
    # The Lease and the Secret are named by these settings; the chart leaves them at their defaults.
    startup = inspect.getsource(sj_operator.handlers)
    assert "name=config.peering, namespace=config.lease_namespace" in startup
    assert "secret_namespace=config.lease_namespace" in startup and "secret_name=config.webhook_secret" in startup
    deployment = (REPO / "deploy/chart/templates/deployment.yaml").read_text()
    assert not any(env in deployment for env in ("SJ_PEERING", "SJ_LEASE_NAMESPACE", "SJ_WEBHOOK_SECRET"))
    assert "POD_NAMESPACE" in deployment


def _needed(webhook: bool) -> set[tuple[str, str, str, str, str | None]]:
    """What the chart must grant: (role kind, group, resource, verb, resourceName or None)."""
    fields = OperatorConfig.model_fields
    names = {"own lease": fields["peering"].default, "own webhook secret": fields["webhook_secret"].default,
             "validatingwebhookconfigurations": CONFIGURATION_NAME,
             "mutatingwebhookconfigurations": ADOPTION_CONFIGURATION_NAME}
    uses = _uses()
    accesses = {a for method, modules in uses.items() if webhook or modules != {"webhook"} for a in ACCESS[method]}
    needed = set()
    for a in accesses | _kopf_needs() | _cache_needs():
        if a.where == "anywhere":
            needed.add(("ClusterRole", a.group, a.resource, a.verb, None))
        elif a.where == "own namespace":
            needed.add(("Role", a.group, a.resource, a.verb, None))
        elif a.where == "own webhook configuration":
            needed.add(("ClusterRole", a.group, a.resource, a.verb, names[a.resource]))
        else:
            needed.add(("Role", a.group, a.resource, a.verb, names[a.where]))
    return needed


def _granted(objects: list[dict[str, Any]]) -> set[tuple[str, str, str, str, str | None]]:
    granted = set()
    for role in of_kind(objects, "ClusterRole") + of_kind(objects, "Role"):
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [None]:
                            granted.add((role["kind"], group, resource, verb, name))
    return granted


@pytest.mark.parametrize("webhook", [True, False], ids=["webhook", "no-webhook"])
def test_the_chart_grants_exactly_what_the_calls_need(webhook: bool) -> None:
    objects = render(f"webhook.enabled={str(webhook).lower()}")
    granted, needed = _granted(objects), _needed(webhook)
    assert not granted - needed, f"granted, never used: {sorted(granted - needed, key=str)}"
    assert not needed - granted, f"used, not granted: {sorted(needed - granted, key=str)}"


def test_the_roles_are_bound_to_the_operators_service_account_only() -> None:
    objects = render("namespace=ops")
    kinds = {o["kind"] for o in objects if o["apiVersion"].startswith("rbac.")}
    assert kinds == {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
    assert [r["metadata"]["namespace"] for r in of_kind(objects, "Role")] == ["ops"]
    for binding in of_kind(objects, "ClusterRoleBinding") + of_kind(objects, "RoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "scavenger-operator", "namespace": "ops"}]
        assert binding["roleRef"]["name"] == "scavenger-operator"
    [deployment] = of_kind(objects, "Deployment")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "scavenger-operator"
    assert all("*" not in str(rule) for role in of_kind(objects, "ClusterRole") for rule in role["rules"])


def test_the_dry_run_and_label_only_pod_permissions_are_guarded_in_the_api_server() -> None:
    """RBAC cannot say "create only as a dry run", "patch only this label" nor "only its own slices": the
    operator guard does, for the operator's ServiceAccount only, and ships whatever the values."""
    for sets in ([], ["bandGuard=false", "webhook.enabled=false"]):
        objects = render("namespace=ops", *sets)
        [policy] = [p for p in of_kind(objects, "ValidatingAdmissionPolicy")
                    if p["metadata"]["name"] == "scavenger-operator-guard"]
        [binding] = [b for b in of_kind(objects, "ValidatingAdmissionPolicyBinding")
                     if b["spec"]["policyName"] == "scavenger-operator-guard"]
        assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
        [condition] = policy["spec"]["matchConditions"]
        assert "'system:serviceaccount:ops:scavenger-operator'" in condition["expression"]
        rules = policy["spec"]["matchConstraints"]["resourceRules"]
        assert rules == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                          "resources": ["pods"]},
                         {"apiGroups": ["discovery.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                          "resources": ["endpointslices"]}]
        create, update, slices = (v["expression"] for v in policy["spec"]["validations"])
        assert "request.dryRun" in create and "request.resource.resource != 'pods'" in create
        assert "'scavenger.dev/protected'" in update and "object.spec == oldObject.spec" in update
        assert "request.resource.resource != 'pods'" in update
        assert f"'{SLICE_MANAGER}'" in slices and "object.metadata.labels[k] == object.metadata.name" in slices
    assert PLURAL == "scavengerjobs"  # the names the chart's rules spell out


CLUSTER_SCOPED = {"nodes", "namespaces", "priorityclasses", "customresourcedefinitions", "clusterroles",
                  "clusterrolebindings", "validatingwebhookconfigurations", "mutatingwebhookconfigurations",
                  "validatingadmissionpolicies", "validatingadmissionpolicybindings", "certificatesigningrequests"}


def _allows(granted: set[tuple[str, str, str, str, str | None]], verb: str, resource: str, namespace: str,
            own_namespace: str) -> bool:
    """What `kubectl auth can-i VERB TYPE[:NAME][/SUB]` answers for these grants (RBAC's own rules: a
    ClusterRole's bound everywhere, the Role's in its namespace only; resourceNames match only a request
    that names one of them; "" asks across all namespaces)."""
    kind, _, subresource = resource.partition("/")
    kind, _, name = kind.partition(":")
    plural, _, group = kind.partition(".")
    wanted = f"{plural}/{subresource}" if subresource else plural
    for role, g, r, v, n in granted:
        if (g, r, v) != (group, wanted, verb) or (n is not None and n != name):
            continue
        if role == "ClusterRole" or (namespace == own_namespace and plural not in CLUSTER_SCOPED):
            return True
    return False


def test_the_e2e_can_i_table_is_what_the_chart_grants() -> None:
    """The e2e stage asks the API server (tests/e2e/test_real_node.py); here the same questions are
    answered from the rendered chart, so a row that contradicts the chart fails without a cluster."""
    from tests.e2e.privileges import MAY, MAY_NOT, SYSTEM

    granted = _granted(render(f"namespace={SYSTEM}"))
    assert [row for row in MAY if not _allows(granted, *row, SYSTEM)] == []
    assert [row for row in MAY_NOT if _allows(granted, *row, SYSTEM)] == []
    # Every permission granted is asked about at least once in MAY.
    asked = {(group, f"{plural}/{sub}" if sub else plural)
             for _, resource, _ in MAY
             for kind, _, sub in [resource.partition("/")]
             for plural, _, group in [kind.partition(":")[0].partition(".")]}
    assert {(g, r) for _, g, r, _, _ in granted} <= asked
