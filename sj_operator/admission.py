"""The validating admission webhook's decision, without I/O: an AdmissionReview in, its answer out.

It calls the same :func:`sj_operator.api.parse_spec`, with the same limits, as the decision loop, so
what the door lets in is what the loop can run, and what the loop would fail never gets in. What the
CRD schema and its CEL rules already refuse never reaches here; this covers the rest (quantities,
durations, MPI consistency, the cluster's limits).

An update that leaves the spec as it was (labels, annotations, finalizers) is always allowed, so an SJ
stored before a limit was tightened can still be relabelled or deleted. Fields a run was built from
take effect at the SJ's next run: the answer carries a warning saying so when they change mid-run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from sj_operator.api import InvalidSpec, Phase, SpecLimits, parse_spec

REVIEW_API_VERSION: Final = "admission.k8s.io/v1"
VALIDATE_PATH: Final = "/validate-scavengerjob"

NEXT_RUN_FIELDS: Final = (
    "image", "command", "args", "env", "workingDir", "resources", "parallelism", "volumes", "checkpointVolume",
    "runAsUser", "runAsGroup", "terminationGracePeriodSeconds", "nodeSelector", "tolerations",
    "serviceAccountName", "imagePullSecrets", "podLabels", "podAnnotations", "mpi",
)
"""Spec fields a run's Job is built from: a change reaches the pods at the next run, never the current one."""
_MID_RUN = (Phase.STARTING, Phase.RUNNING)


def review(body: Mapping[str, Any], limits: SpecLimits) -> dict[str, Any]:
    """The AdmissionReview answering ``body`` (an AdmissionReview request)."""
    return answer_review(body, lambda request: _answer(request, limits))


def answer_review(body: Mapping[str, Any],
                  decide: Callable[[Mapping[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """The AdmissionReview whose response is what ``decide`` answers to the request in ``body``.
    Raises ValueError when ``body`` is not an AdmissionReview request."""
    request = body.get("request") if isinstance(body, Mapping) else None
    if not isinstance(request, Mapping):
        raise ValueError("not an AdmissionReview request: no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ValueError("not an AdmissionReview request: no uid")
    response = {"uid": uid, **decide(request)}
    return {"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": response}


def _answer(request: Mapping[str, Any], limits: SpecLimits) -> dict[str, Any]:
    new = _mapping(request.get("object"))
    old = _mapping(request.get("oldObject"))
    if request.get("operation") == "UPDATE" and old.get("spec") == new.get("spec"):
        return {"allowed": True}
    try:
        parse_spec(new.get("spec"), limits)
    except InvalidSpec as exc:
        return {"allowed": False,
                "status": {"status": "Failure", "code": 422, "reason": "Invalid", "message": str(exc)}}
    warnings = _next_run_warnings(old, new) if request.get("operation") == "UPDATE" else []
    return {"allowed": True, **({"warnings": warnings} if warnings else {})}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _next_run_warnings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    status = _mapping(old.get("status"))
    if status.get("phase") not in _MID_RUN:
        return []
    before, after = _mapping(old.get("spec")), _mapping(new.get("spec"))
    changed = [name for name in NEXT_RUN_FIELDS if before.get(name) != after.get(name)]
    if not changed:
        return []
    fields = ", ".join(f"spec.{name}" for name in changed)
    run = status.get("jobName") or "the current run"
    return [f"{fields} changed while {run} runs: the change takes effect at the next run"]
