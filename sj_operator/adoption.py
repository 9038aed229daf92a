"""Adoption: a plain ``batch/v1`` Job labelled ``scavenger.dev/scavenge: "true"`` runs as a ScavengerJob.

At admission the mutating webhook checks that an SJ can express the Job. When it can, the Job is
suspended and given ``spec.managedBy: scavenger.dev/operator``, so the built-in Job controller never
runs its pods or writes its status. When it cannot, the Job is refused with a message naming its
field. The operator then creates an SJ of the Job's name in its namespace, owned by the Job, so
deleting the Job deletes the SJ. The SJ's runs are what run. When the SJ ends, the Job's status says
``Complete`` or ``Failed``, with the SJ's message.

Nothing here does I/O: the webhook server and the controller call these functions.

The mapping is from the Job's pod template to the SJ's run:
- image, command, args, env, workingDir, resources, volumes (with their one mount each),
  nodeSelector, tolerations, serviceAccountName, imagePullSecrets, runAsUser/runAsGroup,
  terminationGracePeriodSeconds, and the template's labels and annotations;
- ``parallelism``: one pod (both ``parallelism`` and ``completions`` 1, or unset), or a gang (Indexed,
  ``completions`` equal to ``parallelism``);
- the annotations ``scavenger.dev/duration``, ``scavenger.dev/priority-levels`` and
  ``scavenger.dev/checkpoint-volume`` set the SJ fields of those names.

Job fields that only steer the built-in controller's handling of its own pods (``backoffLimit``,
``podReplacementPolicy``, ``ttlSecondsAfterFinished``) are left as they are; the SJ's runs follow the
SJ's rules.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from sj_operator.admission import answer_review
from sj_operator.api import InvalidSpec, SpecLimits, parse_spec
from sj_operator.names import (
    ANNOTATION_CHECKPOINT_VOLUME,
    ANNOTATION_DURATION,
    ANNOTATION_PRIORITY_LEVELS,
    API_VERSION,
    JOB_MANAGER,
    KIND,
    LABEL_SCAVENGE,
)
from sj_operator.observed import small_int

MUTATE_PATH: Final = "/mutate-job"

_POD = "spec.template.spec"
_CONTAINER = f"{_POD}.containers[0]"
_JOB_LEVEL_UNEXPRESSIBLE: Final = ("activeDeadlineSeconds", "podFailurePolicy", "successPolicy",
                                   "backoffLimitPerIndex", "maxFailedIndexes")
_JOB_LEVEL_IGNORED: Final = frozenset({"backoffLimit", "podReplacementPolicy", "ttlSecondsAfterFinished", "suspend",
                                       "selector", "manualSelector", "managedBy", "template", "parallelism",
                                       "completions", "completionMode"})
# Pod fields the API server fills in with these values when they are left out: accepted at those values.
_POD_DEFAULTS: Final = {"dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler", "enableServiceLinks": True}
_POD_MAPPED: Final = ("containers", "volumes", "nodeSelector", "tolerations", "serviceAccountName", "serviceAccount",
                      "imagePullSecrets", "securityContext", "terminationGracePeriodSeconds", "restartPolicy")
_CONTAINER_MAPPED: Final = ("image", "command", "args", "env", "workingDir", "resources", "volumeMounts")
_CONTAINER_IGNORED: Final = ("name", "imagePullPolicy", "terminationMessagePath", "terminationMessagePolicy")
_MOUNT_KEYS: Final = frozenset({"name", "mountPath", "readOnly", "subPath"})
_SOURCES: Final = ("persistentVolumeClaim", "configMap", "secret", "emptyDir")

# Where an SJ field came from in the Job, for messages that name the Job's field.
_ORIGIN: Final = {
    **{f"spec.{name}": f"{_CONTAINER}.{name}" for name in ("image", "command", "args", "env", "workingDir",
                                                           "resources")},
    **{f"spec.{name}": f"{_POD}.{name}" for name in ("volumes", "nodeSelector", "tolerations", "serviceAccountName",
                                                     "imagePullSecrets", "terminationGracePeriodSeconds")},
    "spec.runAsUser": f"{_POD}.securityContext.runAsUser",
    "spec.runAsGroup": f"{_POD}.securityContext.runAsGroup",
    "spec.podLabels": "spec.template.metadata.labels",
    "spec.podAnnotations": "spec.template.metadata.annotations",
    "spec.parallelism": "spec.parallelism",
    "spec.duration": f"metadata.annotations[{ANNOTATION_DURATION}]",
    "spec.priorityLevels": f"metadata.annotations[{ANNOTATION_PRIORITY_LEVELS}]",
    "spec.checkpointVolume": f"metadata.annotations[{ANNOTATION_CHECKPOINT_VOLUME}]",
}


def is_adoptable(job: Mapping[str, Any]) -> bool:
    """True for a Job that asks to be scavenged."""
    return _map(_map(job.get("metadata")).get("labels")).get(LABEL_SCAVENGE) == "true"


def sj_spec_for_job(job: Mapping[str, Any], limits: SpecLimits) -> dict[str, Any]:
    """The SJ spec that runs ``job``, checked as the SJ webhook and the loop check it. Raises
    :class:`InvalidSpec` naming the Job's field when an SJ cannot express it or it is invalid."""
    spec = _map(job.get("spec"))
    manager = spec.get("managedBy")
    if manager not in (None, JOB_MANAGER):
        raise InvalidSpec("spec.managedBy", f"is {manager!r}; an adopted Job is managed by {JOB_MANAGER}")
    for name in _JOB_LEVEL_UNEXPRESSIBLE:
        if spec.get(name) is not None:
            raise _unexpressible(f"spec.{name}")
    if spec.get("manualSelector"):
        raise _unexpressible("spec.manualSelector")
    for name, value in spec.items():
        if name not in _JOB_LEVEL_IGNORED and name not in _JOB_LEVEL_UNEXPRESSIBLE and value not in (None, {}, []):
            raise _unexpressible(f"spec.{name}")
    template = _map(spec.get("template"))
    pod = _map(template.get("spec"))
    meta = _map(template.get("metadata"))
    sj: dict[str, Any] = {"parallelism": _parallelism(spec)}
    sj.update(_pod_fields(pod))
    labels = {key: value for key, value in _map(meta.get("labels")).items() if not _job_controllers(key)}
    if labels:
        sj["podLabels"] = labels
    if meta.get("annotations"):
        sj["podAnnotations"] = dict(meta["annotations"])
    sj.update(_annotated(_map(_map(job.get("metadata")).get("annotations"))))
    try:
        parse_spec(sj, limits)
    except InvalidSpec as exc:
        raise InvalidSpec(_job_field(exc.field), exc.message) from None
    return sj


def sj_for_job(job: Mapping[str, Any], limits: SpecLimits) -> dict[str, Any]:
    """The ScavengerJob of the Job's name and namespace that runs it, owned by the Job."""
    meta = _map(job.get("metadata"))
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {
            "name": meta.get("name"), "namespace": meta.get("namespace"),
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta.get("name"),
                                 "uid": meta.get("uid"), "controller": True, "blockOwnerDeletion": False}],
        },
        "spec": sj_spec_for_job(job, limits),
    }


def mutate_review(body: Mapping[str, Any], limits: SpecLimits) -> dict[str, Any]:
    """The AdmissionReview answering a Job's CREATE: suspended and managed by the operator, or refused
    naming the field an SJ cannot express. A Job that does not ask to be scavenged passes unchanged."""
    return answer_review(body, lambda request: _adopting(request, limits))


def _adopting(request: Mapping[str, Any], limits: SpecLimits) -> dict[str, Any]:
    job = _map(request.get("object"))
    response: dict[str, Any] = {"allowed": True}
    if request.get("operation") == "CREATE" and is_adoptable(job):
        try:
            sj_spec_for_job(job, limits)
        except InvalidSpec as exc:
            response.update(allowed=False, status={
                "status": "Failure", "code": 422, "reason": "Invalid",
                "message": f"{exc}; a Job labelled {LABEL_SCAVENGE}=true runs as a ScavengerJob, which cannot "
                           "run it as written"})
        else:
            patch = [{"op": "add", "path": "/spec/suspend", "value": True},
                     {"op": "add", "path": "/spec/managedBy", "value": JOB_MANAGER}]
            response.update(patchType="JSONPatch", patch=base64.b64encode(json.dumps(patch).encode()).decode())
    return response


def job_final_status(*, succeeded: bool, message: str, started: datetime, now: datetime,
                     pods: int) -> dict[str, Any]:
    """The status that ends an adopted Job as its SJ ended, in the shape the API server requires of a
    Job's external manager (a terminal condition after its target condition, the times, the counts)."""
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")

    def condition(kind: str, reason: str) -> dict[str, Any]:
        return {"type": kind, "status": "True", "reason": reason, "message": message,
                "lastProbeTime": stamp, "lastTransitionTime": stamp}

    status: dict[str, Any] = {"startTime": min(started, now).strftime("%Y-%m-%dT%H:%M:%SZ"), "active": 0}
    if succeeded:
        status.update(conditions=[condition("SuccessCriteriaMet", "ScavengerJobSucceeded"),
                                  condition("Complete", "ScavengerJobSucceeded")],
                      completionTime=stamp, succeeded=pods)
    else:
        status.update(conditions=[condition("FailureTarget", "ScavengerJobFailed"),
                                  condition("Failed", "ScavengerJobFailed")], failed=1)
    return status


def _parallelism(spec: Mapping[str, Any]) -> Any:
    parallelism = spec.get("parallelism", 1)
    completions = spec.get("completions")
    if spec.get("completionMode", "NonIndexed") == "Indexed":
        if completions != parallelism:
            raise InvalidSpec("spec.completions", f"is {completions}; an adopted Indexed Job runs as one gang, so "
                                                  f"completions must equal parallelism ({parallelism})")
        return parallelism
    if parallelism not in (None, 1) or completions not in (None, 1):
        field = "spec.parallelism" if parallelism not in (None, 1) else "spec.completions"
        raise InvalidSpec(field, "an adopted NonIndexed Job runs one pod; for a gang use completionMode Indexed "
                                 "with completions equal to parallelism")
    return 1


def _pod_fields(pod: Mapping[str, Any]) -> dict[str, Any]:
    for name, value in pod.items():
        if name in _POD_MAPPED or value in (None, False, 0, "", [], {}):
            continue
        if _POD_DEFAULTS.get(name, object()) != value:
            raise _unexpressible(f"{_POD}.{name}")
    containers = pod.get("containers") or []
    if len(containers) != 1:
        raise InvalidSpec(f"{_POD}.containers", f"has {len(containers)} containers; an adopted Job has exactly one")
    container = _map(containers[0])
    sj = _container_fields(container)
    volumes = _volumes(pod.get("volumes") or [], container.get("volumeMounts") or [])
    if volumes:
        sj["volumes"] = volumes
    for name in ("nodeSelector", "tolerations", "imagePullSecrets", "terminationGracePeriodSeconds"):
        if pod.get(name) not in (None, [], {}):
            sj[name] = pod[name]
    account = pod.get("serviceAccountName") or pod.get("serviceAccount")
    if pod.get("serviceAccount") and pod.get("serviceAccountName") not in (None, pod["serviceAccount"]):
        raise InvalidSpec(f"{_POD}.serviceAccount", "differs from serviceAccountName")
    if account:
        sj["serviceAccountName"] = account
    sj.update(_security(_map(pod.get("securityContext"))))
    return sj


def _container_fields(container: Mapping[str, Any]) -> dict[str, Any]:
    for name, value in container.items():
        if name not in _CONTAINER_MAPPED and name not in _CONTAINER_IGNORED and value not in (None, [], {}, ""):
            raise _unexpressible(f"{_CONTAINER}.{name}")
    if _map(container.get("resources")).get("claims"):
        raise _unexpressible(f"{_CONTAINER}.resources.claims")
    return {name: container[name] for name in _CONTAINER_MAPPED if name != "volumeMounts" and container.get(name)}


def _security(context: Mapping[str, Any]) -> dict[str, Any]:
    """runAsUser and runAsGroup; runAsNonRoot and the RuntimeDefault seccomp profile are accepted for a
    non-root user, whose SJ pods get both anyway."""
    sj = {name: context[name] for name in ("runAsUser", "runAsGroup") if context.get(name) is not None}
    non_root = isinstance(sj.get("runAsUser"), int) and sj["runAsUser"] > 0
    for name, value in context.items():
        if name in ("runAsUser", "runAsGroup") or value in (None, {}, []):
            continue
        if non_root and (name, value) in (("runAsNonRoot", True), ("seccompProfile", {"type": "RuntimeDefault"})):
            continue
        raise _unexpressible(f"{_POD}.securityContext.{name}")
    return sj


def _volumes(volumes: list[Any], mounts: list[Any]) -> list[dict[str, Any]]:
    """The SJ's volumes: each Job volume with its one mount."""
    names = [_map(volume).get("name") for volume in volumes]
    for index, mount in enumerate(mounts):
        mount = _map(mount)
        if mount.get("name") not in names:
            raise InvalidSpec(f"{_CONTAINER}.volumeMounts[{index}].name", "names no volume of the pod")
        extra = sorted(key for key, value in mount.items() if key not in _MOUNT_KEYS and value not in (None, ""))
        if extra:
            raise _unexpressible(f"{_CONTAINER}.volumeMounts[{index}].{extra[0]}")
    result = []
    for index, volume in enumerate(volumes):
        volume = _map(volume)
        mounted = [_map(m) for m in mounts if _map(m).get("name") == volume.get("name")]
        if len(mounted) != 1:
            raise InvalidSpec(f"{_POD}.volumes[{index}]", f"is mounted {len(mounted)} times; an adopted Job mounts "
                                                          "each volume exactly once")
        sources = [key for key in volume if key != "name"]
        if len(sources) != 1 or sources[0] not in _SOURCES:
            raise InvalidSpec(f"{_POD}.volumes[{index}]", f"an adopted Job's volumes are one of {', '.join(_SOURCES)}")
        entry = {key: value for key, value in mounted[0].items() if value not in (None, "")}
        entry[sources[0]] = volume[sources[0]]
        result.append(entry)
    return result


def _annotated(annotations: Mapping[str, Any]) -> dict[str, Any]:
    sj: dict[str, Any] = {}
    if ANNOTATION_DURATION in annotations:
        sj["duration"] = annotations[ANNOTATION_DURATION]
    if ANNOTATION_CHECKPOINT_VOLUME in annotations:
        sj["checkpointVolume"] = annotations[ANNOTATION_CHECKPOINT_VOLUME]
    if ANNOTATION_PRIORITY_LEVELS in annotations:
        text = str(annotations[ANNOTATION_PRIORITY_LEVELS]).strip()
        levels = small_int(text)
        if levels is None:
            raise InvalidSpec(f"metadata.annotations[{ANNOTATION_PRIORITY_LEVELS}]",
                              f"must be a whole number, got {text[:40]!r}")
        sj["priorityLevels"] = levels
    return sj


def _job_controllers(label: str) -> bool:
    """The labels the API server puts on a Job's template for the Job's own pods (its selector)."""
    return label in ("controller-uid", "job-name") or label.startswith("batch.kubernetes.io/")


def _job_field(field: str) -> str:
    """The Job's field an SJ field came from (the longest known prefix), for messages."""
    for sj_field in sorted(_ORIGIN, key=len, reverse=True):
        if field == sj_field or field.startswith((f"{sj_field}.", f"{sj_field}[")):
            return _ORIGIN[sj_field] + field[len(sj_field):]
    return field


def _unexpressible(field: str) -> InvalidSpec:
    return InvalidSpec(field, "a ScavengerJob cannot express this; remove it, or write a ScavengerJob instead")


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
