"""Pure builders of the objects a ScavengerJob owns; they return plain dicts and call no API.

Each run of an SJ is a ``batch/v1`` Job named by :func:`run_job_name`; a gang run (parallelism > 1) is
an Indexed Job whose pods find each other through a headless Service of the same name
(:func:`build_gang_service`). Both are owned by the SJ, so deleting it removes everything.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from sj_operator.api.model import (
    API_VERSION,
    KIND,
    ScavengerJobSpec,
    Volume,
    checkpoint_interval_seconds,
)

LABEL_JOB_NAME = "scavenger.dev/job-name"
"""Label on every Job, Service and pod of an SJ: the SJ's name (see :func:`sj_label_value`)."""
LABEL_RUN = "scavenger.dev/run"
"""Label on every Job, Service and pod of one run: the run's Job name."""
ANNOTATION_SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
ANNOTATION_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
CONTAINER_NAME = "main"
MAX_RUN_JOB_NAME_LENGTH = 52
"""Run names stay short so that Indexed pod hostnames (``<job>-<index>``) and labels fit in 63."""

_HASH_LENGTH = 5
_DNS_1035_RE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE_RE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_LENGTH]


def run_job_name(sj_name: str, attempt: int) -> str:
    """The deterministic name of run ``attempt`` of an SJ: ``<sj>-r<attempt>``.

    The result is a DNS-1035 label of at most 52 characters. When the SJ name is too long, or is not
    usable as is (dots, a leading digit), it is cut down and followed by 5 hex characters of a hash
    of the full SJ name, so distinct SJs keep distinct run names.
    """
    if attempt < 0:
        raise ValueError(f"attempt must not be negative, got {attempt}")
    suffix = f"-r{attempt}"
    plain = f"{sj_name}{suffix}"
    if len(plain) <= MAX_RUN_JOB_NAME_LENGTH and _DNS_1035_RE.fullmatch(plain):
        return plain
    base = re.sub(r"[^a-z0-9-]+", "-", sj_name.lower())
    if not base[:1].isalpha():
        base = f"sj-{base}"
    budget = MAX_RUN_JOB_NAME_LENGTH - len(suffix) - _HASH_LENGTH - 1
    if budget < 1:
        raise ValueError(f"attempt {attempt} is too large for a run name")
    base = base[:budget].rstrip("-")
    return f"{base}-{_short_hash(sj_name)}{suffix}"


def sj_label_value(sj_name: str) -> str:
    """The value of :data:`LABEL_JOB_NAME` for an SJ: its name, shortened with a hash past 63 characters."""
    if len(sj_name) <= 63 and _LABEL_VALUE_RE.fullmatch(sj_name):
        return sj_name
    head = sj_name[: 63 - _HASH_LENGTH - 1].rstrip("-_.")
    return f"{head}-{_short_hash(sj_name)}"


def _owner_reference(sj_name: str, sj_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": sj_name,
        "uid": sj_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _run_labels(sj_name: str, job_name: str) -> dict[str, str]:
    return {LABEL_JOB_NAME: sj_label_value(sj_name), LABEL_RUN: job_name}


def gang_hosts(job_name: str, parallelism: int) -> list[str]:
    """Stable hostnames of a gang's pods, ``<job>-<index>.<service>``, in rank order."""
    return [f"{job_name}-{index}.{job_name}" for index in range(parallelism)]


def _env(
    *, sj_name: str, namespace: str, spec: ScavengerJobSpec, interrupted_count: int, job_name: str
) -> list[dict[str, Any]]:
    """Operator variables first, so user values may refer to them as ``$(SJ_...)``, then the user's."""
    env: list[dict[str, Any]] = [
        {"name": "SJ_NAME", "value": sj_name},
        {"name": "SJ_NAMESPACE", "value": namespace},
        {"name": "SJ_RESTART_COUNT", "value": str(interrupted_count)},
    ]
    if spec.checkpoint_dir is not None:
        env.append({"name": "SJ_CHECKPOINT_DIR", "value": spec.checkpoint_dir})
    env.append({"name": "SJ_CHECKPOINT_INTERVAL", "value": str(checkpoint_interval_seconds(spec))})
    if spec.is_gang:
        env += [
            {
                "name": "SJ_RANK",
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_COMPLETION_INDEX}']"}},
            },
            {"name": "SJ_WORLD_SIZE", "value": str(spec.parallelism)},
            {"name": "SJ_HOSTS", "value": ",".join(gang_hosts(job_name, spec.parallelism))},
        ]
    env += [var.model_dump(by_alias=True, exclude_none=True) for var in spec.env]
    return env


def _pod_volume(volume: Volume) -> dict[str, Any]:
    out: dict[str, Any] = {"name": volume.name}
    if volume.persistent_volume_claim is not None:
        out["persistentVolumeClaim"] = {"claimName": volume.persistent_volume_claim.claim_name}
    elif volume.config_map is not None:
        out["configMap"] = {"name": volume.config_map.name}
    elif volume.secret is not None:
        out["secret"] = {"secretName": volume.secret.secret_name}
    elif volume.empty_dir is not None:
        out["emptyDir"] = volume.empty_dir.model_dump(by_alias=True, exclude_none=True)
    return out


def _volume_mount(volume: Volume) -> dict[str, Any]:
    out: dict[str, Any] = {"name": volume.name, "mountPath": volume.mount_path}
    if volume.read_only is not None:
        out["readOnly"] = volume.read_only
    if volume.sub_path is not None:
        out["subPath"] = volume.sub_path
    return out


def _container(
    *, sj_name: str, namespace: str, spec: ScavengerJobSpec, interrupted_count: int, job_name: str
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": CONTAINER_NAME, "image": spec.image}
    if spec.command is not None:
        container["command"] = list(spec.command)
    if spec.args is not None:
        container["args"] = list(spec.args)
    if spec.working_dir is not None:
        container["workingDir"] = spec.working_dir
    container["env"] = _env(
        sj_name=sj_name, namespace=namespace, spec=spec, interrupted_count=interrupted_count, job_name=job_name
    )
    resources = spec.effective_resources
    container["resources"] = {
        side: dict(values)
        for side, values in (("requests", resources.requests), ("limits", resources.limits))
        if values
    }
    if spec.volumes:
        container["volumeMounts"] = [_volume_mount(volume) for volume in spec.volumes]
    return container


def _pod_spec(
    *,
    sj_name: str,
    namespace: str,
    spec: ScavengerJobSpec,
    interrupted_count: int,
    job_name: str,
    priority_class_name: str,
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "priorityClassName": priority_class_name,
        "terminationGracePeriodSeconds": spec.termination_grace_period_seconds,
    }
    if spec.is_gang:
        pod["subdomain"] = job_name
    if spec.service_account_name is not None:
        pod["serviceAccountName"] = spec.service_account_name
    security_context = {
        key: value
        for key, value in (("runAsUser", spec.run_as_user), ("runAsGroup", spec.run_as_group))
        if value is not None
    }
    if security_context:
        pod["securityContext"] = security_context
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = [t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations]
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": ref.name} for ref in spec.image_pull_secrets]
    if spec.volumes:
        pod["volumes"] = [_pod_volume(volume) for volume in spec.volumes]
    pod["containers"] = [
        _container(
            sj_name=sj_name, namespace=namespace, spec=spec, interrupted_count=interrupted_count, job_name=job_name
        )
    ]
    return pod


def build_run_job(
    *,
    sj_name: str,
    namespace: str,
    sj_uid: str,
    spec: ScavengerJobSpec,
    status_interrupted_count: int,
    attempt: int,
    priority_class_name: str,
    extra_pod_labels: Mapping[str, str],
    mpi: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``batch/v1`` Job of run ``attempt`` of an SJ.

    The Job never retries (``backoffLimit: 0``, ``restartPolicy: Never``): the operator classifies
    every outcome itself, so there is deliberately no ``podFailurePolicy``. Pod labels are the
    user's ``podLabels``, then ``extra_pod_labels`` (operator-owned, e.g. the protection label), then
    the run labels, later ones winning; annotations are the user's plus ``safe-to-evict: "true"``,
    which always wins so an SJ never blocks a scale-down.

    ``mpi`` wires a ``spec.mpi`` gang (pod 0 the launcher, ssh keys, hostfile): pass
    ``gang.mpi.mpi_job_options(sj_name=..., mpi=spec.mpi)`` and the Job is transformed by
    :func:`gang.mpi.wire_mpi_job`, which raises ``InvalidSpec`` for an SJ it cannot wire. The
    Secret and ConfigMap it mounts are built by ``gang.mpi`` too and must exist before the Job. A
    mapping with none of the option keys leaves the Job unchanged.
    """
    job_name = run_job_name(sj_name, attempt)
    labels = _run_labels(sj_name, job_name)
    pod_labels = {**spec.pod_labels, **extra_pod_labels, **labels}
    pod_annotations = {**spec.pod_annotations, ANNOTATION_SAFE_TO_EVICT: "true"}
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [_owner_reference(sj_name, sj_uid)],
        },
        "spec": {
            "completionMode": "Indexed" if spec.is_gang else "NonIndexed",
            "completions": spec.parallelism,
            "parallelism": spec.parallelism,
            "backoffLimit": 0,
            "podReplacementPolicy": "Failed",
            "template": {
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": _pod_spec(
                    sj_name=sj_name,
                    namespace=namespace,
                    spec=spec,
                    interrupted_count=status_interrupted_count,
                    job_name=job_name,
                    priority_class_name=priority_class_name,
                ),
            },
        },
    }
    if mpi is None:
        return job
    from gang.mpi import wire_mpi_job  # gang.mpi builds on this module, so it cannot be imported at the top

    return wire_mpi_job(job, spec=spec, options=mpi)


def build_gang_service(*, job_name: str, namespace: str, sj_name: str, sj_uid: str) -> dict[str, Any]:
    """The headless Service giving a gang's pods stable DNS names (``<job>-<index>.<job>``).

    Not-ready addresses are published so members resolve each other while they start up.
    """
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": job_name,
            "namespace": namespace,
            "labels": _run_labels(sj_name, job_name),
            "ownerReferences": [_owner_reference(sj_name, sj_uid)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_RUN: job_name},
        },
    }
