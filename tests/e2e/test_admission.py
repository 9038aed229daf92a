"""Bad input is refused at the door: the CRD schema, its CEL rules and the operator's validating webhook,
against the real API server; and what changes mid-run takes effect at the next run."""
from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from sj_operator.names import GROUP, PLURAL, VERSION
from sj_operator.webhook import CONFIGURATION_NAME
from tests.e2e.kube import free_port, wait_for
from tests.e2e.sj import create_sj, custom, jobs_of, run_pods, sj_spec, status, wait_phase
from tests.specgen import RandomPicker, invalid_spec

OPERATOR_CONFIG = {"webhook_port": free_port(), "webhook_host": "127.0.0.1"}
SAMPLE = 240


def _body(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ScavengerJob",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _refusal(api: client.ApiClient, namespace: str, name: str, spec: dict[str, Any], *,
             dry_run: bool = False) -> str | None:
    """The API server's message when it refuses the SJ (as kubectl apply sends it: strict field
    validation), or None when it accepts it."""
    extra = {"dry_run": "All"} if dry_run else {}
    try:
        custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _body(namespace, name, spec),
                                                    field_validation="Strict", **extra)
        return None
    except client.ApiException as exc:
        assert exc.status in (400, 422), exc
        return str(json.loads(exc.body)["message"])


def _answering(api: client.ApiClient) -> bool:
    """Whether the API server calls the operator's webhook (a dry run of a too-short SJ is refused by it)."""
    message = _refusal(api, "default", "probe", sj_spec(duration="5s"), dry_run=True)
    return message is not None and "admission webhook" in message


@pytest.fixture(scope="module")
def webhook(api: client.ApiClient, operator: Any) -> Iterator[None]:
    """The operator's webhook is registered and answering (its first refusal seen)."""
    wait_for("the validating webhook answers", lambda: _answering(api), timeout=60)
    yield  # the operator fixture deletes the configurations it made


def _named(field: str, message: str) -> bool:
    """Whether ``message`` names ``field``, in the webhook's form (``limits[cpu]``) or the schema's
    (``limits.cpu``, ``podLabels[bad key]``)."""
    dotted = re.sub(r"\[([^\]0-9][^\]]*)\]", r".\1", field)
    return field in message or dotted in message


def test_a_sample_of_invalid_specs_is_refused_at_apply_naming_the_field(api, namespace, webhook):
    doors: Counter[str] = Counter()
    for seed in range(SAMPLE):
        spec, field, breaker = invalid_spec(RandomPicker(seed))
        message = _refusal(api, namespace, f"bad-{seed}", spec)
        assert message is not None, f"accepted: {breaker} {spec}"
        assert _named(field, message), f"{breaker}: {field!r} not named in {message!r}"
        doors["webhook" if "admission webhook" in message else "schema and CEL"] += 1
    print(f"\n{SAMPLE} invalid specs refused at apply: {dict(doors)}")
    assert doors["webhook"] and doors["schema and CEL"], "both doors were exercised"
    assert custom(api).list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"] == []


@pytest.mark.parametrize(("spec", "words"), [
    ({"duration": "5s"}, "spec.duration: must be at least 10s"),
    # Past the cluster's maximum (300), within the CRD's own (3600, which the schema refuses first).
    ({"terminationGracePeriodSeconds": 1000}, "spec.terminationGracePeriodSeconds: must be at most 300"),
    ({"env": [{"name": "SJ_RANK", "value": "1"}]}, 'spec.env[0].name: Invalid value: "object": is set by the operator'),
    ({"parallelism": 1, "mpi": {}}, "spec.mpi: Invalid value: \"object\": requires parallelism of at least 2"),
    ({"duration": "0s"}, "spec.duration: must be at least 10s"),
], ids=["short-duration", "huge-grace", "reserved-env", "mpi-without-gang", "zero-duration"])
def test_kubectl_apply_refuses_the_specs_once_accepted(kubeconfig, namespace, webhook, spec, words):
    # The hand-made specs that were accepted (and failed or ran later) before the door was closed.
    manifest = json.dumps(_body(namespace, "handmade", sj_spec(**spec)))
    proc = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "apply", "-f", "-"], input=manifest,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert words in proc.stderr, proc.stderr


@pytest.mark.parametrize(("spec", "words"), [
    ({"duration": "2562047h"}, ["spec.duration", "must be at most 720h"]),
    ({"fallbackAfter": "9999999999h"}, ["spec.fallbackAfter"]),
    ({"resources": {"requests": {"cpu": "1e400"}}}, ["spec.resources.requests[cpu]: must be at most 1E"]),
    ({"resources": {"limits": {"memory": "9" * 65}}}, ["spec.resources.limits"]),
    ({"priorityLevels": 2**40}, ["spec.priorityLevels"]),
    ({"maxInterruptions": 10**7}, ["spec.maxInterruptions"]),
    ({"image": "x" * 1025}, ["spec.image"]),
    ({"podLabels": {f"k{i}": "v" for i in range(65)}}, ["spec.podLabels"]),
    ({"args": ["x" * 32768] * 9}, ["spec: must be at most 262144 bytes"]),
], ids=["duration", "fallback-after", "quantity", "quantity-length", "priority-levels", "max-interruptions",
        "image", "pod-labels", "whole-spec"])
def test_kubectl_apply_refuses_a_spec_past_a_bound_naming_the_field(kubeconfig, namespace, webhook, spec, words):
    # Issue 40: the far ends the schema once admitted made the decision pass raise; the CRD (schema and
    # CEL) or the webhook now refuses each, naming the field.
    manifest = json.dumps(_body(namespace, "past-bound", sj_spec(**spec)))
    # A client-side apply keeps the whole object in an annotation too, which the API server caps at 256 KiB
    # before the webhook sees the spec: the whole spec's own bound shows through a server-side apply.
    side = ["--server-side"] if len(manifest) > 200_000 else []
    proc = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "apply", *side, "-f", "-"], input=manifest,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    for word in words:
        assert word in proc.stderr, proc.stderr


def test_a_change_mid_run_warns_and_takes_effect_at_the_next_run(api, kubeconfig, namespace, webhook):
    create_sj(api, namespace, "grows", sj_spec(run_for="600s", parallelism=1))
    wait_phase(api, namespace, "grows", "Running")
    proc = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "-n", namespace, "patch", "sj", "grows",
                           "--type=merge", "-p", '{"spec": {"parallelism": 2}}'],
                          capture_output=True, text=True, timeout=60, check=True)
    assert "spec.parallelism changed while grows-r1 runs: the change takes effect at the next run" in proc.stderr
    [job] = jobs_of(api, namespace, "grows")
    assert job.spec.parallelism == 1, "the current run is left as it was built"
    # The run is interrupted (its pods deleted as a preemption would); the next run has the new shape.
    core = client.CoreV1Api(api)
    for pod in run_pods(api, namespace, "grows-r1"):
        core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
    def next_run_running() -> dict[str, Any] | None:
        st = status(api, namespace, "grows")
        return st if st.get("jobName") == "grows-r2" and st.get("phase") == "Running" else None

    assert wait_for("the next run Running", next_run_running, timeout=90)["interruptedCount"] == 1
    wait_for("two pods of the next run", lambda: len(run_pods(api, namespace, "grows-r2")) == 2, timeout=30)


def test_an_invalid_spec_stored_while_no_webhook_answered_is_failed_by_the_loop(api, namespace, webhook):
    # failurePolicy Ignore: while no replica answers, the schema is the only door; the loop applies
    # the webhook's function and fails the SJ naming the same field.
    admission = client.AdmissionregistrationV1Api(api)
    saved = admission.read_validating_webhook_configuration(CONFIGURATION_NAME)
    admission.delete_validating_webhook_configuration(CONFIGURATION_NAME)
    try:
        # The API server drops the webhook from its own cache a moment after the delete: until a dry
        # run passes, a create would still be refused by the webhook.
        wait_for("the API server to stop calling the webhook", lambda: not _answering(api), timeout=30)
        create_sj(api, namespace, "slipped", sj_spec(duration="5s"))
    finally:
        saved.metadata.resource_version = None
        admission.create_validating_webhook_configuration(saved)
        wait_for("the validating webhook answers again", lambda: _answering(api), timeout=60)
    st = wait_phase(api, namespace, "slipped", "Failed")
    assert st["message"].startswith("invalid spec: spec.duration: must be at least 10s")
    assert jobs_of(api, namespace, "slipped") == []
