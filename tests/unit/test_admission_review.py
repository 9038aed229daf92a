"""The webhook's answers (sj_operator.admission.review): refusals name the field, updates that leave the
spec alone always pass, mid-run changes carry a warning, malformed reviews are not answered."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sj_operator.admission import NEXT_RUN_FIELDS, review
from sj_operator.api import DEFAULT_LIMITS, SpecLimits

GOOD = {"image": "busybox:1.36", "duration": "10m"}


def request(operation: str, spec: Any, *, old_spec: Any = None, old_phase: str | None = None,
            job: str = "x-r1") -> dict[str, Any]:
    req: dict[str, Any] = {"uid": "u-1", "operation": operation, "namespace": "ns", "name": "x",
                           "object": {"spec": spec}}
    if operation == "UPDATE":
        old: dict[str, Any] = {"spec": old_spec}
        if old_phase:
            old["status"] = {"phase": old_phase, "jobName": job}
        req["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def answer(body: dict[str, Any], limits: SpecLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    reply = review(body, limits)
    assert reply["apiVersion"] == "admission.k8s.io/v1" and reply["kind"] == "AdmissionReview"
    assert reply["response"]["uid"] == "u-1"
    return dict(reply["response"])


def test_a_valid_create_is_allowed_without_warnings() -> None:
    assert answer(request("CREATE", GOOD)) == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize(("spec", "message"), [
    ({**GOOD, "duration": "5s"}, "spec.duration: must be at least 10s"),
    ({**GOOD, "terminationGracePeriodSeconds": 1_000_000_000},
     "spec.terminationGracePeriodSeconds: must be at most 300"),
    ({**GOOD, "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}},
     "spec.resources.limits[cpu]: must be at least the request (2)"),
    ({**GOOD, "parallelism": 2, "mpi": {}}, "spec.command: is required with spec.mpi"),
    ({"duration": "10m"}, "spec.image: is required"),
    (None, "spec.image: is required"),
])
def test_an_invalid_create_is_refused_naming_the_field(spec: Any, message: str) -> None:
    response = answer(request("CREATE", spec))
    assert response["allowed"] is False
    assert response["status"]["code"] == 422 and response["status"]["reason"] == "Invalid"
    assert response["status"]["message"].startswith(message)


def test_the_operators_limits_are_applied() -> None:
    strict = SpecLimits(max_termination_grace=10, min_duration=timedelta(hours=1))
    assert answer(request("CREATE", {**GOOD, "terminationGracePeriodSeconds": 30}), strict)["allowed"] is False
    response = answer(request("CREATE", {**GOOD, "terminationGracePeriodSeconds": 10}), strict)
    assert response["status"]["message"].startswith("spec.duration: must be at least 1h")
    assert answer(request("CREATE", {**GOOD, "duration": "1h", "terminationGracePeriodSeconds": 10}),
                  strict)["allowed"] is True


def test_an_update_that_leaves_the_spec_alone_is_allowed_even_when_the_spec_is_invalid() -> None:
    # An SJ stored before a limit was tightened can still get labels, lose finalizers, be deleted.
    invalid = {**GOOD, "duration": "5s"}
    assert answer(request("UPDATE", invalid, old_spec=invalid))["allowed"] is True


def test_an_update_to_an_invalid_spec_is_refused() -> None:
    response = answer(request("UPDATE", {**GOOD, "duration": "5s"}, old_spec=GOOD, old_phase="Running"))
    assert response["allowed"] is False and "spec.duration" in response["status"]["message"]


@pytest.mark.parametrize("phase", ["Starting", "Running"])
def test_changing_a_run_field_mid_run_warns_that_it_takes_effect_at_the_next_run(phase: str) -> None:
    response = answer(request("UPDATE", {**GOOD, "parallelism": 3}, old_spec=GOOD, old_phase=phase))
    assert response["allowed"] is True
    assert response["warnings"] == ["spec.parallelism changed while x-r1 runs: the change takes effect at the next run"]


def test_several_changed_fields_are_all_named() -> None:
    new = {**GOOD, "parallelism": 3, "resources": {"requests": {"cpu": "1"}}, "image": "busybox:1.37"}
    [warning] = answer(request("UPDATE", new, old_spec=GOOD, old_phase="Running"))["warnings"]
    assert warning.startswith("spec.image, spec.resources, spec.parallelism changed")


@pytest.mark.parametrize("phase", [None, "Pending", "Interrupted", "Suspended", "Succeeded", "Failed"])
def test_no_warning_without_a_run(phase: str | None) -> None:
    response = answer(request("UPDATE", {**GOOD, "parallelism": 3}, old_spec=GOOD, old_phase=phase))
    assert response == {"uid": "u-1", "allowed": True}


def test_fields_that_act_at_once_give_no_warning() -> None:
    for change in ({"suspend": True}, {"maxInterruptions": 3}, {"priorityLevels": 5}, {"duration": "20m"}):
        response = answer(request("UPDATE", {**GOOD, **change}, old_spec=GOOD, old_phase="Running"))
        assert "warnings" not in response, change


def test_every_run_field_is_a_spec_field() -> None:
    from sj_operator.api import ScavengerJobSpec
    aliases = {info.alias for info in ScavengerJobSpec.model_fields.values()}
    assert set(NEXT_RUN_FIELDS) <= aliases


@pytest.mark.parametrize("body", [{}, {"request": None}, {"request": {"operation": "CREATE"}},
                                  {"request": {"uid": ""}}, [], "review", None])
def test_a_malformed_review_is_not_answered(body: Any) -> None:
    with pytest.raises(ValueError, match="not an AdmissionReview request"):
        review(body, DEFAULT_LIMITS)
