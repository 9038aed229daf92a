"""E2E fixtures: a real cluster, by default the local kwok-backed one.

The local cluster (`hack/cluster up`) is used when it runs, or started here (and
stopped at the end) when it does not. `SJ_E2E_CLUSTER=kind` runs the same tests on
kind through pytest-kind instead, for machines with Docker; tests that need
simulated nodes are skipped there, and those that need kind's real ones (`kind_only`)
are skipped on the local cluster.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kubernetes import client, config

if TYPE_CHECKING:
    from sj_operator.config import OperatorConfig

REPO = Path(__file__).resolve().parents[2]
USE_KIND = os.environ.get("SJ_E2E_CLUSTER", "local") == "kind"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The real-node stage runs last: it installs the operator in-cluster, which must not meet the
    # in-process operators of the other modules.
    items.sort(key=lambda item: item.get_closest_marker("real_node") is not None)
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
        if USE_KIND and item.get_closest_marker("kwok_only"):
            item.add_marker(pytest.mark.skip(reason="needs simulated kwok nodes; not available on kind"))
        if not USE_KIND and item.get_closest_marker("kind_only"):
            item.add_marker(pytest.mark.skip(reason="needs kind's real nodes and containers (SJ_E2E_CLUSTER=kind)"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kwok_only: needs the local cluster's simulated nodes")
    config.addinivalue_line("markers", "kind_only: needs kind's real nodes and containers (two workers)")
    config.addinivalue_line("markers", "real_node: needs the real kubelet node (hack/node; root)")


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[str]:
    if USE_KIND:
        yield from _kind_cluster()
        return
    path = REPO / ".cluster" / "kubeconfig"
    started = False
    if subprocess.run([REPO / "hack" / "cluster", "status"], capture_output=True).returncode != 0:
        subprocess.run([REPO / "hack" / "cluster", "up"], check=True)
        started = True
    else:
        _scheduler_going()
    try:
        yield str(path)
    finally:
        if started:
            subprocess.run([REPO / "hack" / "cluster", "down"], check=False)


def _scheduler_going() -> None:
    """The reused local cluster's kube-scheduler let go on: a run killed inside `kube.scheduler_paused` (SIGKILL
    runs no ``finally``) leaves it stopped, and every test after would wait for pods never scheduled."""
    from tests.e2e.kube import component_pid

    with contextlib.suppress(OSError, ValueError):  # no pid file, or its process gone
        os.kill(component_pid("kube-scheduler"), signal.SIGCONT)


def _kind_cluster() -> Iterator[str]:
    """The kind cluster, created (or reused) through pytest-kind. hack/e2e-kind (make e2e-kind) sets:
    SJ_KIND_CLUSTER (name), SJ_KIND_CONFIG (kind config file), SJ_KIND_IMAGE (node image), SJ_KIND_LOAD
    (Docker images to load into the nodes), SJ_KIND_KEEP=1 (keep it for the demos that follow). kind and
    kubectl come from .bin/ when built there (hack/build-binaries kind), else pytest-kind downloads them."""
    from pytest_kind import KindCluster

    env = os.environ
    name = env.get("SJ_KIND_CLUSTER", "scavenger-e2e")
    binaries = {tool: REPO / ".bin" / tool for tool in ("kind", "kubectl") if (REPO / ".bin" / tool).exists()}
    cluster = KindCluster(name, REPO / ".cluster" / "kind-e2e" / "kubeconfig", image=env.get("SJ_KIND_IMAGE") or None,
                          kind_path=binaries.get("kind"), kubectl_path=binaries.get("kubectl"))
    cluster.kubeconfig_path.parent.mkdir(parents=True, exist_ok=True)
    cluster.create(config_file=env.get("SJ_KIND_CONFIG") or None)
    for image in env.get("SJ_KIND_LOAD", "").split():
        cluster.load_docker_image(image)
    try:
        yield str(cluster.kubeconfig_path)
    finally:
        if env.get("SJ_KIND_KEEP") != "1":
            cluster.delete()


def _kind_gateway() -> str:
    out = subprocess.run(["docker", "network", "inspect", "kind", "--format",
                          "{{range .IPAM.Config}}{{.Gateway}} {{end}}"], capture_output=True, text=True, check=True)
    return next(address for address in out.stdout.split() if ":" not in address)


@pytest.fixture(scope="session")
def api(kubeconfig: str) -> client.ApiClient:
    os.environ["KUBECONFIG"] = kubeconfig
    config.load_kube_config(config_file=kubeconfig)
    return client.ApiClient()


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    from tests.e2e.kube import unique

    core = client.CoreV1Api(api)
    name = unique("e2e")
    core.create_namespace({"metadata": {"name": name}})
    # Pods need the namespace's default ServiceAccount, created asynchronously.
    from tests.e2e.kube import wait_for
    wait_for(f"default ServiceAccount in {name}", lambda: core.read_namespaced_service_account("default", name))
    yield name
    # Stop the namespace's work at once (grace 0) and wait until its SJs, Jobs and pods are gone, so what a
    # test ran never holds capacity or a place in the queue during the next one. The namespace itself is
    # left to the namespace controller, which takes about 5 s for even an empty one: waiting for it added
    # that to every test.
    from sj_operator.names import GROUP, PLURAL, VERSION
    custom = client.CustomObjectsApi(api)
    try:
        custom.delete_collection_namespaced_custom_object(GROUP, VERSION, name, PLURAL)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
    client.BatchV1Api(api).delete_collection_namespaced_job(name, propagation_policy="Background")
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    core.delete_namespace(name, propagation_policy="Background")

    def sjs_left() -> list[object]:
        try:
            items: list[object] = custom.list_namespaced_custom_object(GROUP, VERSION, name, PLURAL)["items"]
        except client.ApiException as exc:
            if exc.status != 404:  # 404: no SJ CRD in this test's cluster
                raise
            return []
        return items

    def emptied() -> bool:
        return not (sjs_left() or client.BatchV1Api(api).list_namespaced_job(name).items
                    or core.list_namespaced_pod(name).items)

    wait_for(f"namespace {name} emptied of SJs, Jobs and pods", emptied, timeout=120)


@pytest.fixture(scope="session")
def crd(api: client.ApiClient) -> None:
    """The CRDs from crds/ (ScavengerJob, ScavengerQuota), applied and Established."""
    for path in sorted((REPO / "crds").glob("*.yaml")):
        _apply_crd(api, path)


def _apply_crd(api: client.ApiClient, path: Path) -> None:
    import yaml

    from tests.e2e.kube import wait_for

    ext = client.ApiextensionsV1Api(api)
    body = yaml.safe_load(path.read_text())
    name = body["metadata"]["name"]
    try:
        current = ext.read_custom_resource_definition(name)
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        ext.replace_custom_resource_definition(name, body)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        ext.create_custom_resource_definition(body)

    def established() -> bool:
        crd = ext.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_for("CRD Established", established)


@pytest.fixture(scope="module")
def operator(request: pytest.FixtureRequest, api: client.ApiClient, crd: None) -> Iterator[object]:
    """The operator running in-process (in a thread with its own event loop).

    A test module may set OPERATOR_CONFIG = {...} to override settings. With a webhook, its two
    configurations are made here first, as the chart makes them in a cluster (the operator only sets
    their caBundle), pointing the API server at this process; they are deleted at the end."""
    from tests.e2e.sj import InProcessOperator, test_config

    settings = dict(getattr(request.module, "OPERATOR_CONFIG", {}))
    if USE_KIND and settings.get("webhook_host") == "127.0.0.1":
        # The API server runs in a kind node: it reaches this host at the gateway of kind's Docker network
        # (the webhook listens on every address).
        settings["webhook_host"] = _kind_gateway()
    op = InProcessOperator(test_config(**settings))
    webhook = op.config.webhook_port is not None
    if webhook:
        _make_webhook_configurations(api, op.config)
    op.start()
    try:
        yield op.config
    finally:
        op.stop()
        if webhook:
            _delete_webhook_configurations(api)


def _make_webhook_configurations(api: client.ApiClient, settings: OperatorConfig) -> None:
    """The webhook configurations of an operator outside the cluster (``url``), without a caBundle yet."""
    from sj_operator.webhook import adoption_configuration, webhook_configuration

    url = f"https://{settings.webhook_host}:{settings.webhook_port}"
    admission = client.AdmissionregistrationV1Api(api)
    _delete_webhook_configurations(api)  # left by an interrupted run
    admission.create_validating_webhook_configuration(webhook_configuration(service=None, url=url))
    admission.create_mutating_webhook_configuration(
        adoption_configuration(service=None, url=url, namespaces=settings.namespaces))


def _delete_webhook_configurations(api: client.ApiClient) -> None:
    from sj_operator.webhook import ADOPTION_CONFIGURATION_NAME, CONFIGURATION_NAME

    admission = client.AdmissionregistrationV1Api(api)
    for delete, name in ((admission.delete_validating_webhook_configuration, CONFIGURATION_NAME),
                         (admission.delete_mutating_webhook_configuration, ADOPTION_CONFIGURATION_NAME)):
        try:
            delete(name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
