"""Adoption of labelled Jobs: the Job-to-SJ mapping, the webhook's answer, the final Job status, the adopter."""
from __future__ import annotations

import asyncio
import base64
import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sj_operator.adopter import ADOPTIONS_PER_PASS, Adopter, in_turns
from sj_operator.adoption import job_final_status, mutate_review, sj_for_job, sj_spec_for_job
from sj_operator.api import DEFAULT_LIMITS, InvalidSpec
from sj_operator.decide import ClusterView
from sj_operator.kube import Forbidden, Invalid, KubeError
from sj_operator.observed import adopted_job, sj_object

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def job(**spec: Any) -> dict[str, Any]:
    """A labelled Job as the API server stores it (defaults filled in, the selector's template labels)."""
    return {
        "metadata": {"name": "j", "namespace": "team", "uid": "job-uid", "creationTimestamp": "2026-11-24T11:00:00Z",
                     "labels": {"scavenger.dev/scavenge": "true"},
                     "annotations": {"scavenger.dev/duration": "5m", "scavenger.dev/priority-levels": "4",
                                     "scavenger.dev/checkpoint-volume": "ckpt"}},
        "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 6, "completionMode": "NonIndexed",
                 "suspend": True, "managedBy": "scavenger.dev/operator", "podReplacementPolicy": "TerminatingOrFailed",
                 "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "job-uid"}},
                 "template": {
                     "metadata": {"labels": {"app": "sim", "batch.kubernetes.io/controller-uid": "job-uid",
                                             "controller-uid": "job-uid", "job-name": "j"},
                                  "annotations": {"team": "a"}},
                     "spec": {"restartPolicy": "Never", "dnsPolicy": "ClusterFirst",
                              "schedulerName": "default-scheduler", "enableServiceLinks": True,
                              "securityContext": {"runAsUser": 1000, "runAsNonRoot": True},
                              "terminationGracePeriodSeconds": 30, "nodeSelector": {"pool": "a"},
                              "tolerations": [{"key": "pool", "operator": "Exists"}],
                              "volumes": [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "c"}}],
                              "containers": [{"name": "main", "image": "sim:1", "command": ["run"], "args": ["--fast"],
                                              "env": [{"name": "MODE", "value": "x"}],
                                              "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}},
                                              "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                                              "imagePullPolicy": "IfNotPresent",
                                              "terminationMessagePath": "/dev/termination-log",
                                              "terminationMessagePolicy": "File"}]}}, **spec},
    }


def changed(path: str, value: Any) -> dict[str, Any]:
    """``job()`` with the value at ``path`` (dots, list indexes as numbers) set."""
    body = job()
    *parents, last = path.split(".")
    node: Any = body
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[int(last) if last.isdigit() else last] = value
    return body


def test_a_job_maps_to_the_sj_that_runs_it() -> None:
    assert sj_spec_for_job(job(), DEFAULT_LIMITS) == {
        "parallelism": 1, "image": "sim:1", "command": ["run"], "args": ["--fast"],
        "env": [{"name": "MODE", "value": "x"}], "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}},
        "volumes": [{"name": "ckpt", "mountPath": "/ckpt", "persistentVolumeClaim": {"claimName": "c"}}],
        "nodeSelector": {"pool": "a"}, "tolerations": [{"key": "pool", "operator": "Exists"}],
        "terminationGracePeriodSeconds": 30, "runAsUser": 1000,
        "podLabels": {"app": "sim"}, "podAnnotations": {"team": "a"},
        "duration": "5m", "priorityLevels": 4, "checkpointVolume": "ckpt",
    }


def test_an_indexed_job_is_a_gang_and_the_sj_is_owned_by_the_job() -> None:
    sj = sj_for_job(job(parallelism=3, completions=3, completionMode="Indexed"), DEFAULT_LIMITS)
    assert sj["spec"]["parallelism"] == 3
    assert sj["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
                                                  "uid": "job-uid", "controller": True, "blockOwnerDeletion": False}]


@pytest.mark.parametrize(("body", "field"), [
    (changed("spec.activeDeadlineSeconds", 60), "spec.activeDeadlineSeconds"),
    (changed("spec.podFailurePolicy", {"rules": []}), "spec.podFailurePolicy"),
    (changed("spec.managedBy", "kueue.x-k8s.io/multikueue"), "spec.managedBy"),
    (changed("spec.parallelism", 2), "spec.parallelism"),
    (changed("spec.completions", 4), "spec.completions"),
    (job(parallelism=3, completions=2, completionMode="Indexed"), "spec.completions"),
    (changed("spec.template.spec.initContainers", [{"name": "i", "image": "x"}]), "spec.template.spec.initContainers"),
    (changed("spec.template.spec.hostNetwork", True), "spec.template.spec.hostNetwork"),
    (changed("spec.template.spec.priorityClassName", "high"), "spec.template.spec.priorityClassName"),
    (changed("spec.template.spec.dnsPolicy", "None"), "spec.template.spec.dnsPolicy"),
    (changed("spec.template.spec.containers.0.livenessProbe", {"exec": {}}),
     "spec.template.spec.containers[0].livenessProbe"),
    (changed("spec.template.spec.containers.0.securityContext", {"privileged": True}),
     "spec.template.spec.containers[0].securityContext"),
    (changed("spec.template.spec.securityContext", {"runAsUser": 0, "runAsNonRoot": True}),
     "spec.template.spec.securityContext.runAsNonRoot"),
    (changed("spec.template.spec.containers.0.volumeMounts.0.mountPropagation", "Bidirectional"),
     "spec.template.spec.containers[0].volumeMounts[0].mountPropagation"),
    (changed("spec.template.spec.volumes", [{"name": "ckpt", "hostPath": {"path": "/"}}]),
     "spec.template.spec.volumes[0]"),
    (changed("spec.template.spec.containers.0.resources", {"requests": {"cpu": "-1"}}),
     "spec.template.spec.containers[0].resources.requests[cpu]"),
    (changed("spec.template.spec.containers.0.env", [{"name": "SJ_RANK", "value": "1"}]),
     "spec.template.spec.containers[0].env[0].name"),
    (changed("spec.template.spec.terminationGracePeriodSeconds", 100_000),
     "spec.template.spec.terminationGracePeriodSeconds"),
    (changed("metadata.annotations", {"scavenger.dev/duration": "soon"}),
     "metadata.annotations[scavenger.dev/duration]"),
    (changed("metadata.annotations", {"scavenger.dev/priority-levels": "many"}),
     "metadata.annotations[scavenger.dev/priority-levels]"),
    (changed("metadata.annotations", {"scavenger.dev/checkpoint-volume": "nope"}),
     "metadata.annotations[scavenger.dev/checkpoint-volume]"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_what_an_sj_cannot_express_is_refused_naming_the_jobs_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        sj_spec_for_job(body, DEFAULT_LIMITS)
    assert refused.value.field == field


def review(body: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    return {"request": {"uid": "r-1", "operation": operation, "object": body}}


def test_the_webhook_suspends_an_adoptable_job_and_leaves_others_alone() -> None:
    fresh = job()
    del fresh["spec"]["suspend"], fresh["spec"]["managedBy"]
    answer = mutate_review(review(fresh), DEFAULT_LIMITS)["response"]
    assert answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(answer["patch"])) == [
        {"op": "add", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/spec/managedBy", "value": "scavenger.dev/operator"}]
    unlabelled = copy.deepcopy(fresh)
    unlabelled["metadata"]["labels"] = {}
    assert mutate_review(review(unlabelled), DEFAULT_LIMITS)["response"] == {"uid": "r-1", "allowed": True}
    refused = mutate_review(review(changed("spec.activeDeadlineSeconds", 5)), DEFAULT_LIMITS)["response"]
    assert refused["allowed"] is False and refused["status"]["code"] == 422
    assert refused["status"]["message"].startswith("spec.activeDeadlineSeconds: a ScavengerJob cannot express this")
    with pytest.raises(ValueError, match="not an AdmissionReview"):
        mutate_review({"request": {}}, DEFAULT_LIMITS)


def test_the_final_status_is_what_the_api_server_requires_of_an_external_manager() -> None:
    done = job_final_status(succeeded=True, message="m", started=NOW - timedelta(hours=1), now=NOW, pods=3)
    assert [c["type"] for c in done["conditions"]] == ["SuccessCriteriaMet", "Complete"]
    assert done["succeeded"] == 3 and done["completionTime"] == "2026-11-24T12:00:00Z"
    assert done["startTime"] == "2026-11-24T11:00:00Z" and done["active"] == 0
    failed = job_final_status(succeeded=False, message="m", started=NOW + timedelta(seconds=5), now=NOW, pods=1)
    assert [c["type"] for c in failed["conditions"]] == ["FailureTarget", "Failed"]
    assert "completionTime" not in failed and failed["startTime"] <= "2026-11-24T12:00:00Z"


class FakeKube:
    def __init__(self, *, invalid: bool = False, answers: list[KubeError | None] = ()) -> None:  # type: ignore[assignment]
        self.created: list[dict[str, Any]] = []
        self.attempts = 0
        self.statuses: list[tuple[str, dict[str, Any]]] = []
        self.events: list[str] = []
        self.messages: list[str] = []
        self.invalid = invalid
        self.answers = list(answers)
        """What each create answers in turn (None: made); made once they run out."""

    async def create_sj(self, sj: dict[str, Any]) -> bool:
        self.attempts += 1
        if self.invalid:
            raise Invalid(422, "Invalid", "spec: refused by a CEL rule")
        if self.answers and (refused := self.answers.pop(0)) is not None:
            raise refused
        self.created.append(sj)
        return True

    async def patch_job_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.statuses.append((name, status))

    async def event(self, **kw: Any) -> None:
        self.events.append(kw["reason"])
        self.messages.append(kw["message"])


def view(jobs: list[dict[str, Any]], sjs: list[dict[str, Any]] = ()) -> ClusterView:  # type: ignore[assignment]
    return ClusterView(sjs=tuple(sj_object(s) for s in sjs), jobs={}, run_pods={}, active_pods=(), nodes=(),
                       adopted=tuple(adopted_job(j) for j in jobs))


def sj_of(phase: str | None, owner: str = "job-uid") -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "team", "uid": "sj-uid",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": owner}]},
            "spec": {"parallelism": 2}, "status": {"phase": phase, "message": "all done"} if phase else {}}


def adopter(kube: FakeKube, handles: str | None = None) -> Adopter:
    return Adopter(kube, DEFAULT_LIMITS, handles=lambda ns: handles in (None, ns),  # type: ignore[arg-type]
                   clock=lambda: NOW)


def adopt(kube: FakeKube, v: ClusterView, handles: str | None = None) -> None:
    asyncio.run(adopter(kube, handles).reconcile(v, 0.0))


@pytest.mark.parametrize(("jobs", "sjs", "created", "ended", "events"), [
    ([job()], [], 1, None, ["Adopted"]),
    ([job()], [sj_of("Running")], 0, None, []),
    ([job()], [sj_of("Succeeded")], 0, "Complete", ["Completed"]),
    ([job()], [sj_of("Failed")], 0, "Failed", ["Failed"]),
    ([job()], [sj_of("Running", owner="someone-else")], 0, "Failed", ["Failed"]),
    ([changed("spec.managedBy", None)], [], 0, None, []),  # admitted while no webhook answered: not adopted
    ([changed("status", {"conditions": [{"type": "Complete", "status": "True"}]})], [sj_of("Succeeded")], 0, None,
     []),
], ids=["creates-the-sj", "running", "succeeded", "failed", "name-taken", "not-managed", "already-ended"])
def test_the_adopter(jobs, sjs, created, ended, events) -> None:
    kube = FakeKube()
    for body in jobs:
        body.setdefault("status", {})
    adopt(kube, view(jobs, sjs))
    assert len(kube.created) == created
    assert [status["conditions"][-1]["type"] for _, status in kube.statuses] == ([ended] if ended else [])
    assert kube.events == events
    if ended == "Complete":
        assert kube.statuses[0][1]["succeeded"] == 2
        assert kube.statuses[0][1]["conditions"][-1]["message"] == "ScavengerJob j succeeded: all done"


def test_an_sj_the_api_server_refuses_fails_the_job_with_its_reason() -> None:
    kube = FakeKube(invalid=True)
    adopt(kube, view([job()]))
    [(_, status)] = kube.statuses
    assert status["conditions"][-1]["type"] == "Failed"
    assert "refused by a CEL rule" in status["conditions"][-1]["message"]


def test_jobs_outside_the_namespaces_handled_are_left() -> None:
    kube = FakeKube()
    adopt(kube, view([job()]), handles="other")
    assert not kube.created and not kube.statuses


QUOTA = Forbidden(403, "Forbidden", 'scavengerjobs.scavenger.dev "j" is forbidden: exceeded quota: q, requested: '
                  "count/scavengerjobs.scavenger.dev=1, used: count/scavengerjobs.scavenger.dev=0, limited: "
                  "count/scavengerjobs.scavenger.dev=0")
POLICY = Forbidden(403, "Forbidden", "denied by policy no-sj")
DOWN = KubeError(503, "ServiceUnavailable", "etcd is slow")


# Passes at these clocks (monotonic seconds); the default waits: 10 s after the first refusal, doubling.
@pytest.mark.parametrize(("answers", "clocks", "tried", "events"), [
    ([QUOTA] * 9, [0, 5, 9.9, 10, 15, 29.9, 30, 69.9, 70],
     [True, False, False, True, False, False, True, False, True], ["AdoptionRefused"]),
    ([DOWN] * 9, [0, 9.9, 10, 29.9, 30], [True, False, True, False, True], []),
    # Made at 30: not made again while the watch has not shown it (60 s), then refused afresh.
    ([QUOTA, QUOTA, None, QUOTA], [0, 10, 30, 31, 89.9, 90, 99.9, 100],
     [True, True, True, False, False, True, False, True], ["AdoptionRefused", "Adopted", "AdoptionRefused", "Adopted"]),
    ([QUOTA, POLICY, POLICY], [0, 10, 30], [True, True, True], ["AdoptionRefused", "AdoptionRefused"]),
    ([QUOTA] * 9, [600 * n for n in range(9)], [True] * 9, ["AdoptionRefused"]),
    ([QUOTA] * 20, [0, 10, 30, 70, 150, 310, 630, 1230, 1829.9, 1830], [True] * 8 + [False, True],
     ["AdoptionRefused"]),
], ids=["forbidden-waits-doubling", "any-error-waits", "success-starts-over", "a-new-message-is-told",
        "waited-out-every-time", "the-wait-stops-at-the-cap"])
def test_a_refused_job_waits_before_it_is_tried_again(answers, clocks, tried, events) -> None:
    kube, v = FakeKube(answers=answers), view([job()])
    a = adopter(kube)
    attempts = []
    for clock in clocks:
        before = kube.attempts
        asyncio.run(a.reconcile(v, clock))
        attempts.append(kube.attempts > before)
    assert attempts == tried
    assert kube.events == events
    assert kube.statuses == [], "a refusal that may pass once the namespace changes never ends the Job"


def test_a_forbidden_sj_is_told_on_the_job_with_the_api_servers_message() -> None:
    kube = FakeKube(answers=[QUOTA, QUOTA])
    a = adopter(kube)
    asyncio.run(a.reconcile(view([job()]), 0))
    asyncio.run(a.reconcile(view([job()]), 10))
    assert kube.attempts == 2
    [message] = kube.messages
    assert message == (f"cannot create its ScavengerJob: {QUOTA.message} (the Job stays suspended; trying again in "
                       "10s, then less often)")


def test_a_job_whose_sj_was_made_is_not_made_again_while_the_watch_has_not_shown_it() -> None:
    """At a namespace's quota of SJs the API server answers a second create 403 before it finds the name taken:
    a pass that sees the Job and not yet the SJ made for it must neither try again nor tell of a refusal."""
    kube = FakeKube(answers=[None, QUOTA])
    a = adopter(kube)
    for clock in (0, 1, 30, 59.9):
        asyncio.run(a.reconcile(view([job()]), clock))
    assert (kube.attempts, kube.events) == (1, ["Adopted"])
    asyncio.run(a.reconcile(view([job()], [sj_of("Pending")]), 60))  # seen: nothing left to remember
    assert (kube.attempts, a.made) == (1, {})


def test_a_job_that_goes_away_starts_over() -> None:
    kube = FakeKube(answers=[QUOTA, QUOTA, QUOTA])
    a = adopter(kube)
    asyncio.run(a.reconcile(view([job()]), 0))
    asyncio.run(a.reconcile(view([]), 1))
    assert a.held == {} and a.told == {}
    asyncio.run(a.reconcile(view([job()]), 2))  # made again with the same uid: tried and told at once
    assert kube.attempts == 2 and kube.events == ["AdoptionRefused", "AdoptionRefused"]


def test_a_job_whose_other_writes_fail_waits_too_and_is_not_told_of_a_create() -> None:
    class Refusing(FakeKube):
        async def patch_job_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
            raise POLICY

    kube = Refusing()
    a = adopter(kube)
    v = view([job()], [sj_of("Succeeded")])
    for clock in (0, 5, 10):
        asyncio.run(a.reconcile(v, clock))
    assert a.held["job-uid"].refusals == 2 and kube.events == []


def labelled(namespace: str, n: int, minute: int) -> dict[str, Any]:
    """Job ``j{n}`` of the namespace, made ``minute`` minutes after the first."""
    body = job()
    made = NOW - timedelta(hours=6) + timedelta(minutes=minute)
    body["metadata"].update(name=f"j{n}", namespace=namespace, uid=f"{namespace}-{n}",
                            creationTimestamp=made.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return body


@pytest.mark.parametrize(("jobs", "count", "order"), [
    ([("a", 1, 0), ("a", 2, 1), ("a", 3, 2), ("b", 1, 5)], 4, ["a/j1", "b/j1", "a/j2", "a/j3"]),
    ([("a", 1, 0), ("a", 2, 1), ("a", 3, 2), ("b", 1, 5)], 2, ["a/j1", "b/j1"]),
    ([("b", 2, 9), ("c", 1, 3), ("b", 1, 4), ("a", 1, 3)], 9, ["a/j1", "c/j1", "b/j1", "b/j2"]),
    ([("a", 2, 0), ("a", 1, 0)], 9, ["a/j1", "a/j2"]),
], ids=["namespaces-take-turns", "the-bound", "oldest-first-in-a-turn", "same-age-by-name"])
def test_namespaces_take_turns_oldest_first(jobs, count, order) -> None:
    adopted = [adopted_job(labelled(ns, n, minute)) for ns, n, minute in jobs]
    assert [job.key for job in in_turns(adopted, count)] == order
    assert [job.key for job in in_turns(reversed(adopted), count)] == order, "a stable order"


def running(made: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**sj, "status": {"phase": "Running"}} for sj in made]


def test_a_pass_writes_for_at_most_the_bound_and_the_rest_come_in_later_passes() -> None:
    jobs = [labelled("big", n, n) for n in range(3 * ADOPTIONS_PER_PASS)] + [labelled("small", n, n) for n in range(3)]
    kube = FakeKube()
    a = adopter(kube)
    passes = []
    while len(kube.created) < len(jobs):
        before = len(kube.created)
        asyncio.run(a.reconcile(view(jobs, running(kube.created)), len(passes)))
        passes.append([f"{sj['metadata']['namespace']}/{sj['metadata']['name']}" for sj in kube.created[before:]])
    assert [len(p) for p in passes] == [ADOPTIONS_PER_PASS] * 3 + [3]
    assert passes[0][:6] == ["big/j0", "small/j0", "big/j1", "small/j1", "big/j2", "small/j2"], \
        "the small tenant's Jobs are not behind the big one's"
    assert sorted(k for p in passes for k in p) == sorted(f"{j['metadata']['namespace']}/{j['metadata']['name']}"
                                                          for j in jobs), "each Job once"


def test_held_jobs_leave_the_pass_to_the_others() -> None:
    jobs = [labelled("a", n, n) for n in range(ADOPTIONS_PER_PASS + 8)]
    kube = FakeKube(answers=[QUOTA] * ADOPTIONS_PER_PASS)
    a = adopter(kube)
    asyncio.run(a.reconcile(view(jobs), 0))
    assert kube.attempts == ADOPTIONS_PER_PASS and not kube.created
    asyncio.run(a.reconcile(view(jobs), 1))  # the refused ones wait: the other 8 are tried
    assert kube.attempts == ADOPTIONS_PER_PASS + 8
    assert {sj["metadata"]["name"] for sj in kube.created} == {f"j{n}" for n in range(ADOPTIONS_PER_PASS, len(jobs))}
    assert kube.events.count("AdoptionRefused") == ADOPTIONS_PER_PASS
