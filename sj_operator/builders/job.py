"""The ``batch/v1`` Job of one run of a ScavengerJob, as a plain dict.

Each run is a Job named by :func:`sj_operator.names.run_job_name`, owned by the SJ. A gang run
(parallelism > 1) is an Indexed Job whose pods find each other through a headless Service of the same
name (:mod:`sj_operator.builders.service`); an MPI gang is then wired by :func:`gang.mpi.wire_mpi_job`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gang.hosts import DEFAULT_CLUSTER_DOMAIN, gang_hosts
from gang.mpi import MPIJobOptions, wire_mpi_job
from sj_operator.api import ScavengerJobSpec, Volume, checkpoint_interval_seconds
from sj_operator.names import (
    ANNOTATION_COMPLETION_INDEX,
    ANNOTATION_CONFIG_INDEX,
    ANNOTATION_SAFE_TO_EVICT,
    CONTAINER_NAME,
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINT_INTERVAL,
    ENV_CONFIG_INDEX,
    ENV_HOSTS,
    ENV_NAME,
    ENV_NAMESPACE,
    ENV_RANK,
    ENV_RESTART_COUNT,
    ENV_WORLD_SIZE,
    LABEL_RUN,
    child_metadata,
    run_job_name,
)


def _env(
    *, sj_name: str, namespace: str, spec: ScavengerJobSpec, interrupted_count: int, job_name: str, config_index: int,
    cluster_domain: str,
) -> list[dict[str, Any]]:
    """Operator variables first, so user values may refer to them as ``$(SJ_...)``, then the user's."""
    env: list[dict[str, Any]] = [
        {"name": ENV_NAME, "value": sj_name},
        {"name": ENV_NAMESPACE, "value": namespace},
        {"name": ENV_RESTART_COUNT, "value": str(interrupted_count)},
    ]
    if spec.fallbacks:
        env.append({"name": ENV_CONFIG_INDEX, "value": str(config_index)})
    if spec.checkpoint_dir is not None:
        env.append({"name": ENV_CHECKPOINT_DIR, "value": spec.checkpoint_dir})
    env.append({"name": ENV_CHECKPOINT_INTERVAL, "value": str(checkpoint_interval_seconds(spec))})
    if spec.is_gang:
        env += [
            {
                "name": ENV_RANK,
                "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_COMPLETION_INDEX}']"}},
            },
            {"name": ENV_WORLD_SIZE, "value": str(spec.parallelism)},
            {"name": ENV_HOSTS, "value": ",".join(gang_hosts(job_name, spec.parallelism, namespace=namespace,
                                                              cluster_domain=cluster_domain))},
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
    *, sj_name: str, namespace: str, spec: ScavengerJobSpec, interrupted_count: int, job_name: str,
    config_index: int, cluster_domain: str,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": CONTAINER_NAME, "image": spec.image}
    if spec.command is not None:
        container["command"] = list(spec.command)
    if spec.args is not None:
        container["args"] = list(spec.args)
    if spec.working_dir is not None:
        container["workingDir"] = spec.working_dir
    container["env"] = _env(
        sj_name=sj_name, namespace=namespace, spec=spec, interrupted_count=interrupted_count, job_name=job_name,
        config_index=config_index, cluster_domain=cluster_domain,
    )
    resources = spec.effective_resources
    container["resources"] = {
        side: dict(values)
        for side, values in (("requests", resources.requests), ("limits", resources.limits))
        if values
    }
    if spec.volumes:
        container["volumeMounts"] = [_volume_mount(volume) for volume in spec.volumes]
    if _non_root(spec):
        # The restricted Pod Security Standard's rules for a container: they take nothing from a non-root
        # process (it has no capabilities to use) and let the SJ run where that standard is enforced.
        container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    return container


def _non_root(spec: ScavengerJobSpec) -> bool:
    return spec.run_as_user is not None and spec.run_as_user > 0


def _pod_spec(
    *,
    sj_name: str,
    namespace: str,
    spec: ScavengerJobSpec,
    interrupted_count: int,
    job_name: str,
    priority_class_name: str,
    config_index: int,
    cluster_domain: str,
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
    security_context: dict[str, Any] = {
        key: value
        for key, value in (("runAsUser", spec.run_as_user), ("runAsGroup", spec.run_as_group))
        if value is not None
    }
    if _non_root(spec):
        security_context.update(runAsNonRoot=True, seccompProfile={"type": "RuntimeDefault"})
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
            sj_name=sj_name, namespace=namespace, spec=spec, interrupted_count=interrupted_count, job_name=job_name,
            config_index=config_index, cluster_domain=cluster_domain,
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
    mpi: MPIJobOptions | None = None,
    config_index: int = 0,
    cluster_domain: str = DEFAULT_CLUSTER_DOMAIN,
) -> dict[str, Any]:
    """The ``batch/v1`` Job of run ``attempt`` of an SJ, in configuration ``config_index`` (``spec`` is
    that configuration: ``ScavengerJobSpec.config``; its pods get ``SJ_CONFIG_INDEX`` when the SJ has
    fallbacks).

    The Job never retries (``backoffLimit: 0``, ``restartPolicy: Never``): the operator classifies
    every outcome itself. Its ``podFailurePolicy`` tells the Job controller the same: a disrupted pod
    (``DisruptionTarget``: preemption, eviction, taint, node shutdown) ends the whole run, as the
    operator would (a replacement pod would carry on while no operator watched and hide the
    interruption; the failed Job keeps it on record), and so does the app's non-zero exit;
    ``podReplacementPolicy: Failed`` never doubles a terminating member. Pod labels are the
    user's ``podLabels``, then ``extra_pod_labels`` (operator-owned, e.g. the protection label), then
    the run labels, later ones winning; annotations are the user's plus ``safe-to-evict: "true"``,
    which always wins so an SJ never blocks a scale-down.

    ``mpi`` wires a ``spec.mpi`` gang (pod 0 the launcher, ssh keys, hostfile): pass
    :func:`sj_operator.builders.mpi.mpi_job_options` and the Job is transformed by
    :func:`gang.mpi.wire_mpi_job` (spec validation has made sure it can be). The Secret and ConfigMap
    it mounts (:mod:`sj_operator.builders.mpi`) must exist before the Job.

    A gang's members are named in ``SJ_HOSTS`` by their fully qualified names in ``cluster_domain``
    (:func:`gang.hosts.gang_hosts`).
    """
    job_name = run_job_name(sj_name, attempt)
    metadata = child_metadata(name=job_name, namespace=namespace, sj_name=sj_name, sj_uid=sj_uid,
                              labels={LABEL_RUN: job_name})
    if config_index:
        metadata["annotations"] = {ANNOTATION_CONFIG_INDEX: str(config_index)}
    labels = metadata["labels"]
    pod_labels = {**spec.pod_labels, **extra_pod_labels, **labels}
    pod_annotations = {**spec.pod_annotations, ANNOTATION_SAFE_TO_EVICT: "true"}
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "completionMode": "Indexed" if spec.is_gang else "NonIndexed",
            "completions": spec.parallelism,
            "parallelism": spec.parallelism,
            "backoffLimit": 0,
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {"action": "FailJob",
                 "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "NotIn", "values": [0]}},
            ]},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": _pod_spec(
                    sj_name=sj_name,
                    namespace=namespace,
                    spec=spec,
                    interrupted_count=status_interrupted_count,
                    job_name=job_name,
                    priority_class_name=priority_class_name,
                    config_index=config_index,
                    cluster_domain=cluster_domain,
                ),
            },
        },
    }
    if mpi is None:
        return job
    user_command = (*(spec.command or ()), *(spec.args or ()))
    return wire_mpi_job(job, options=mpi, container=CONTAINER_NAME, user_command=user_command,
                        user_env=len(spec.env), run_as_user=spec.run_as_user, run_as_group=spec.run_as_group)


def admission_shape(pod_spec: Mapping[str, Any]) -> str:
    """A run's pod spec without what names its SJ and run (environment values, the gang's subdomain and
    hostname): runs of one shape in one namespace meet the same admission rules (security, limits,
    quotas per pod), so a dry run's acceptance of one stands for the others for a while."""
    def anonymous(container: Mapping[str, Any]) -> dict[str, Any]:
        return {**container, "env": [{k: v for k, v in e.items() if k != "value"} for e in container.get("env", ())]}

    spec = {k: v for k, v in pod_spec.items() if k not in ("subdomain", "hostname")}
    for key in ("containers", "initContainers"):
        if key in spec:
            spec[key] = [anonymous(c) for c in spec[key]]
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))
