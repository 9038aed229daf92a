"""The scavenger band is guarded (deploy/band-guard.yaml, a ValidatingAdmissionPolicy): a user's pod,
Job or CronJob in a `scavenger-band-*` PriorityClass is refused; the operator's runs are not; an SJ
cannot choose its pods' class."""
from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, utils

from sj_operator.names import GROUP, PLURAL, VERSION
from sj_operator.policy.priority import PRIORITY_BAND
from tests.e2e.kube import sim_container, wait_for
from tests.e2e.sj import create_sj, custom, run_pods, sj_spec, wait_phase

REPO = Path(__file__).resolve().parents[2]


def _guard() -> str:
    """The policy as the chart renders it."""
    return subprocess.run([str(REPO / ".bin/helm"), "template", "scavenger", str(REPO / "deploy/chart"),
                           "--kube-version", "1.34.4", "--show-only", "templates/band-guard.yaml"],
                          capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def band_guard(api: client.ApiClient) -> Iterator[None]:
    """The policy as the chart installs it, in force (it stays: later tests run under it too, and the chart's
    release adopts it when the real-node tests install the chart)."""
    for doc in yaml.safe_load_all(_guard()):
        doc["metadata"].setdefault("annotations", {}).update(
            {"meta.helm.sh/release-name": "scavenger", "meta.helm.sh/release-namespace": "default"})
        try:
            utils.create_from_dict(api, doc)
        except utils.FailToCreateError as exc:
            if not all(e.status == 409 for e in exc.api_exceptions):
                raise
    yield


@pytest.fixture
def user_api(kubeconfig: str, api: client.ApiClient, namespace: str) -> client.ApiClient:
    """A client acting as a namespace editor (a ServiceAccount with the `edit` role), not an admin."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "developer"}})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "developer-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "developer", "namespace": namespace}]})
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    user = client.ApiClient(configuration)
    user.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:developer")
    _wait_until_in_force(client.CoreV1Api(user), namespace)
    return user


def _wait_until_in_force(core: client.CoreV1Api, namespace: str) -> None:
    """A new policy takes effect once the API server has loaded it (a few seconds): dry runs tell when."""
    def refused() -> bool:
        try:
            core.create_namespaced_pod(namespace, _pod("scavenger-band-0"), dry_run="All")
            return False
        except client.ApiException as exc:
            return exc.status == 403 and "scavenger-band-guard" in exc.body
    wait_for("the band guard in force", refused, timeout=60)


def _pod(priority_class: str) -> dict[str, Any]:
    return {"metadata": {"name": "sneaky"},
            "spec": {"priorityClassName": priority_class, "containers": [sim_container(run_for="60s")]}}


def _job(priority_class: str) -> dict[str, Any]:
    return {"metadata": {"name": "sneaky"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "priorityClassName": priority_class,
                                           "containers": [sim_container(run_for="60s")]}}}}


def _refused(call: Any) -> str:
    with pytest.raises(client.ApiException) as err:
        call()
    assert err.value.status == 403, err.value
    return str(json.loads(err.value.body)["message"])


@pytest.mark.parametrize("band", sorted(PRIORITY_BAND))
def test_a_users_pod_in_the_band_is_refused(band_guard, user_api, namespace, band):
    message = _refused(lambda: client.CoreV1Api(user_api).create_namespaced_pod(namespace, _pod(band)))
    assert f"spec.priorityClassName: {band} is the scavenger band" in message
    assert "ValidatingAdmissionPolicy 'scavenger-band-guard'" in message


def test_a_users_job_and_cronjob_in_the_band_are_refused(band_guard, user_api, namespace):
    batch = client.BatchV1Api(user_api)
    assert "is the scavenger band" in _refused(lambda: batch.create_namespaced_job(namespace, _job("scavenger-band-0")))
    cron = {"metadata": {"name": "sneaky"}, "spec": {"schedule": "* * * * *", "jobTemplate": _job("scavenger-band-2")}}
    cron["spec"]["jobTemplate"].pop("metadata")
    assert "is the scavenger band" in _refused(lambda: batch.create_namespaced_cron_job(namespace, cron))


def test_a_users_pod_outside_the_band_is_untouched(band_guard, user_api, namespace):
    client.CoreV1Api(user_api).create_namespaced_pod(namespace, {
        "metadata": {"name": "ordinary"}, "spec": {"containers": [sim_container(run_for="60s")]}})


def test_the_operators_runs_are_not_refused(api, band_guard, namespace, operator):
    create_sj(api, namespace, "banded", sj_spec(run_for="600s", parallelism=2))
    wait_phase(api, namespace, "banded", "Running")
    wait_for("both pods", lambda: len(run_pods(api, namespace, "banded-r1")) == 2)
    assert {pod.spec.priority_class_name for pod in run_pods(api, namespace, "banded-r1")} == {"scavenger-band-0"}


def test_a_users_change_to_a_band_runs_spec_or_the_operators_labels_is_refused(api, band_guard, user_api, namespace,
                                                                                 operator):
    """A namespace editor may not scale their run's Job past what was admitted, protect their own pods from
    preemption, or take off the labels the operator counts and watches its runs by; their own labels are theirs."""
    create_sj(api, namespace, "guarded", sj_spec(run_for="600s", parallelism=2))
    wait_phase(api, namespace, "guarded", "Running")
    wait_for("both pods", lambda: len(run_pods(api, namespace, "guarded-r1")) == 2)
    batch, core = client.BatchV1Api(user_api), client.CoreV1Api(user_api)
    pod = run_pods(api, namespace, "guarded-r1")[0].metadata.name
    own = {"scavenger.dev/job-name": None}
    for call in (lambda: batch.patch_namespaced_job("guarded-r1", namespace,
                                                    {"spec": {"parallelism": 5, "completions": 5}}),
                 lambda: batch.patch_namespaced_job("guarded-r1", namespace, {"metadata": {"labels": own}}),
                 lambda: core.patch_namespaced_pod(pod, namespace,
                                                   {"metadata": {"labels": {"scavenger.dev/protected": "true"}}}),
                 lambda: core.patch_namespaced_pod(pod, namespace, {"metadata": {"labels": own}}),
                 lambda: batch.patch_namespaced_job("guarded-r1", namespace, {"metadata": {"annotations": {
                     "scavenger.dev/config-index": "1"}}})):
        assert "runs in the scavenger band: only the scavenger operator changes" in _refused(call)
    mine = {"metadata": {"labels": {"team": "vision"}}}
    assert core.patch_namespaced_pod(pod, namespace, mine).metadata.labels["team"] == "vision"
    assert batch.patch_namespaced_job("guarded-r1", namespace, mine).metadata.labels["team"] == "vision"
    job = client.BatchV1Api(api).read_namespaced_job("guarded-r1", namespace)
    assert (job.spec.parallelism, job.metadata.labels["scavenger.dev/job-name"]) == (2, "guarded")


def test_an_sj_cannot_choose_its_pods_priority_class(api, band_guard, namespace, operator):
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ScavengerJob", "metadata": {"name": "chooser"},
            "spec": sj_spec(priorityClassName="system-cluster-critical")}
    with pytest.raises(client.ApiException) as err:
        custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body,
                                                    field_validation="Strict")
    assert 'unknown field "spec.priorityClassName"' in json.loads(err.value.body)["message"]
