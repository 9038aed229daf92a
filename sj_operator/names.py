"""Every name the operator puts into the cluster, once: the resource's API names, labels, annotations,
the environment of SJ pods, and the rules that name an SJ's children.

Names of children are deterministic (a run is ``<sj>-r<attempt>``), so a launch repeated after a crash
finds what the first one created. Where an SJ name is too long or not usable as is, it is shortened
and followed by a short hash of the full name, so distinct SJs keep distinct children.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

# --- the custom resource -----------------------------------------------------------------------
GROUP: Final = "scavenger.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "ScavengerJob"
LIST_KIND: Final = "ScavengerJobList"
PLURAL: Final = "scavengerjobs"
SINGULAR: Final = "scavengerjob"
SHORT_NAME: Final = "sj"
CRD_NAME: Final = f"{PLURAL}.{GROUP}"
QUOTA_KIND: Final = "ScavengerQuota"
QUOTA_PLURAL: Final = "scavengerquotas"
QUOTA_SHORT_NAME: Final = "sjq"
QUOTA_CRD_NAME: Final = f"{QUOTA_PLURAL}.{GROUP}"
CLUSTER_QUOTA_KIND: Final = "ScavengerClusterQuota"
CLUSTER_QUOTA_PLURAL: Final = "scavengerclusterquotas"
CLUSTER_QUOTA_SHORT_NAME: Final = "sjcq"
CLUSTER_QUOTA_CRD_NAME: Final = f"{CLUSTER_QUOTA_PLURAL}.{GROUP}"

# --- labels and annotations ------------------------------------------------------------------------
RESERVED_LABEL_PREFIX: Final = f"{GROUP}/"
"""Label prefix owned by the operator; user ``podLabels`` may not use it."""
LABEL_SJ: Final = f"{GROUP}/job-name"
"""On every Job, Service, pod and owned object of an SJ: the SJ's name (see :func:`sj_label_value`)."""
LABEL_RUN: Final = f"{GROUP}/run"
"""On every Job, Service and pod of one run: the run's Job name."""
LABEL_PROTECTED: Final = f"{GROUP}/protected"
"""On a run's pods: "true" while its PodDisruptionBudget protects it (the budget selects on it)."""
MANAGED_BY: Final = MappingProxyType({"app.kubernetes.io/managed-by": "scavenger"})
"""On objects the operator makes that no SJ owns (the PriorityClass band) and on every budget."""
ANNOTATION_SAFE_TO_EVICT: Final = "cluster-autoscaler.kubernetes.io/safe-to-evict"
ANNOTATION_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
"""Set by the Job controller on an Indexed Job's pods: the pod's index (its rank)."""

LABEL_SCAVENGE: Final = f"{GROUP}/scavenge"
"""On a ``batch/v1`` Job: ``"true"`` has the operator adopt it (suspend it and run it as an SJ of its name)."""
ANNOTATION_DURATION: Final = f"{GROUP}/duration"
ANNOTATION_PRIORITY_LEVELS: Final = f"{GROUP}/priority-levels"
ANNOTATION_CHECKPOINT_VOLUME: Final = f"{GROUP}/checkpoint-volume"
"""On an adopted Job: the SJ's ``duration``, ``priorityLevels`` and ``checkpointVolume``."""
ANNOTATION_CONFIG_INDEX: Final = f"{GROUP}/config-index"
"""On a run's Job launched in a fallback configuration: its index (``status.configIndex`` once recorded)."""
ANNOTATION_LAUNCH: Final = f"{GROUP}/launch"
"""On a run's Job: the launch that made it (a token of the launch's own), so that a create retried after an attempt
that was stored though its answer was lost knows the Job it finds for its own, not another decider's."""
JOB_MANAGER: Final = f"{GROUP}/operator"
"""``spec.managedBy`` of an adopted Job: the built-in Job controller leaves it (and its status) to the operator."""

CONTAINER_NAME: Final = "main"
"""The one container of an SJ pod."""

# --- the environment of SJ pods ------------------------------------------------------------------
ENV_NAME: Final = "SJ_NAME"
ENV_NAMESPACE: Final = "SJ_NAMESPACE"
ENV_RESTART_COUNT: Final = "SJ_RESTART_COUNT"
ENV_CHECKPOINT_DIR: Final = "SJ_CHECKPOINT_DIR"
ENV_CHECKPOINT_INTERVAL: Final = "SJ_CHECKPOINT_INTERVAL"
ENV_RANK: Final = "SJ_RANK"
ENV_WORLD_SIZE: Final = "SJ_WORLD_SIZE"
ENV_HOSTS: Final = "SJ_HOSTS"
ENV_CONFIG_INDEX: Final = "SJ_CONFIG_INDEX"
"""Which configuration runs: 0 the preferred one, i the spec's fallbacks[i - 1]."""
CHECKPOINT_ENV: Final = (ENV_NAME, ENV_NAMESPACE, ENV_RESTART_COUNT, ENV_CHECKPOINT_DIR, ENV_CHECKPOINT_INTERVAL)
"""What every pod gets to find and pace its checkpoints; MPI workers pass them on to the ranks."""
RESERVED_ENV_NAMES: Final = frozenset({*CHECKPOINT_ENV, ENV_RANK, ENV_WORLD_SIZE, ENV_HOSTS, ENV_CONFIG_INDEX})
"""Set by the operator on every pod; user ``env`` may not define them."""

# --- the PriorityClass band ------------------------------------------------------------------------
BAND_CLASS_PREFIX: Final = "scavenger-band-"
"""What the name of every PriorityClass of the scavenger band starts with (`policy.priority.PRIORITY_BAND`). The
chart's band guard lets nobody but the operator's Jobs make a pod in a class so named, and a pod's class cannot
change once it exists: unlike its labels, which its namespace may edit, it tells an SJ's pod for certain."""


def in_band(priority_class_name: object) -> bool:
    """Whether a pod's ``spec.priorityClassName`` (as the API gives it: anything) is a class of the scavenger band,
    as the band guard reads it."""
    return isinstance(priority_class_name, str) and priority_class_name.startswith(BAND_CLASS_PREFIX)


# --- names of an SJ's children ---------------------------------------------------------------------
MAX_RUN_JOB_NAME_LENGTH: Final = 52
"""Run names stay short so that Indexed pod hostnames (``<job>-<index>``) and labels fit in 63."""
MAX_OBJECT_NAME_LENGTH: Final = 253
HASH_LENGTH: Final = 5

_DNS_1035_RE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE_RE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def short_hash(text: str) -> str:
    """Five hex characters of a SHA-256 of ``text``: what keeps shortened names distinct."""
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


@functools.lru_cache(maxsize=65_536)  # asked for every SJ on every pass
def run_job_name(sj_name: str, attempt: int) -> str:
    """The deterministic name of run ``attempt`` of an SJ: ``<sj>-r<attempt>``.

    The result is a DNS-1035 label of at most 52 characters. When the SJ name is too long, or is not
    usable as is (dots, a leading digit), it is cut down and followed by a hash of the full SJ name.
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
    budget = MAX_RUN_JOB_NAME_LENGTH - len(suffix) - HASH_LENGTH - 1
    if budget < 1:
        raise ValueError(f"attempt {attempt} is too large for a run name")
    base = base[:budget].rstrip("-")
    return f"{base}-{short_hash(sj_name)}{suffix}"


def sj_label_value(sj_name: str) -> str:
    """The value of :data:`LABEL_SJ` for an SJ: its name, shortened with a hash past 63 characters."""
    if len(sj_name) <= 63 and _LABEL_VALUE_RE.fullmatch(sj_name):
        return sj_name
    head = sj_name[: 63 - HASH_LENGTH - 1].rstrip("-_.")
    return f"{head}-{short_hash(sj_name)}"


def child_name(sj_name: str, suffix: str) -> str:
    """``<sj><suffix>`` for an object the SJ owns, shortened with a hash past 253 characters."""
    plain = f"{sj_name}{suffix}"
    if len(plain) <= MAX_OBJECT_NAME_LENGTH:
        return plain
    head = sj_name[: MAX_OBJECT_NAME_LENGTH - len(suffix) - HASH_LENGTH - 1].rstrip("-.")
    return f"{head}-{short_hash(sj_name)}{suffix}"


def mpi_secret_name(sj_name: str) -> str:
    """An MPI SJ's ssh Secret: ``<sj>-mpi-ssh``."""
    return child_name(sj_name, "-mpi-ssh")


def hostfile_configmap_name(sj_name: str) -> str:
    """An MPI SJ's hostfile ConfigMap: ``<sj>-mpi-hostfile``."""
    return child_name(sj_name, "-mpi-hostfile")


def protection_budget_name(sj_name: str) -> str:
    """An SJ's PodDisruptionBudget: ``<sj>-protect``."""
    return child_name(sj_name, "-protect")


def owner_reference(sj_name: str, sj_uid: str) -> dict[str, Any]:
    """The reference that makes an SJ the controller and owner of a child (deleted with it)."""
    return {"apiVersion": API_VERSION, "kind": KIND, "name": sj_name, "uid": sj_uid, "controller": True,
            "blockOwnerDeletion": True}


def controller_uid(metadata: Mapping[str, Any]) -> str | None:
    """The uid of the ScavengerJob that controls an object: its ownerReference with ``controller: true`` of
    kind ScavengerJob in this group (:func:`owner_reference`); None when no SJ controls it (a user's object,
    or one another controller owns), whatever its name or labels say."""
    for ref in metadata.get("ownerReferences") or ():
        if (isinstance(ref, Mapping) and ref.get("controller") is True and ref.get("kind") == KIND
                and str(ref.get("apiVersion", "")).startswith(f"{GROUP}/")):
            uid = ref.get("uid")
            return uid if isinstance(uid, str) and uid else None
    return None


def controlled_by(metadata: Mapping[str, Any], sj_uid: str) -> bool:
    """Whether the SJ of uid ``sj_uid`` controls the object of ``metadata``: the one thing that makes an object
    of a run's name that run's own, to reuse, patch or delete (a name or a label anyone can copy)."""
    return bool(sj_uid) and controller_uid(metadata) == sj_uid


def child_metadata(*, name: str, namespace: str, sj_name: str, sj_uid: str,
                   labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Metadata of an object an SJ owns: its name, the SJ's label (plus ``labels``), the owner reference."""
    return {"name": name, "namespace": namespace, "labels": {**(labels or {}), LABEL_SJ: sj_label_value(sj_name)},
            "ownerReferences": [owner_reference(sj_name, sj_uid)]}
