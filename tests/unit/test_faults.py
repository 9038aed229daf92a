"""One bad object never stops the loop: views that cannot be made, SJs whose steps raise, and the watchdog
that fails ``/healthz`` when the loop itself stops moving."""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from sj_operator import controller as controller_module
from sj_operator import memo as memo_module
from sj_operator.caches import ObjectCache, PodCache
from sj_operator.config import OperatorConfig
from sj_operator.controller import Controller
from sj_operator.faults import CONDITION, Fault, Watchdog, culprits, describe
from sj_operator.metrics import Metrics
from sj_operator.observed import adopted_job, job_view, pod_view, small_int
from tests.unit.test_controller import FakeKube, run, sj, view

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("raw", "expected"), [
    ("3", 3), (3, 3), ("0", 0), ("", None), ("²", None), ("٣", None), ("-1", None), (-1, None), ("1e3", None),
    ("9" * 5000, None), (str(2**31), None), (True, None), (None, None), ([], None), ({"a": 1}, None), (1.0, None),
])
def test_small_int_is_total(raw: Any, expected: int | None) -> None:
    assert small_int(raw) == expected


@pytest.mark.parametrize("annotation", ["²", "٣", "9" * 5000, "-0", " 1"])
def test_a_pods_completion_index_annotation_never_raises(annotation: str) -> None:
    """The bug behind the issue: ``"²".isdigit()`` is true and ``int("²")`` raises, which stopped the pod
    watch of the whole cluster for any pod, in any namespace, annotated so."""
    pod = pod_view({"metadata": {"uid": "u", "annotations": {"batch.kubernetes.io/job-completion-index": annotation},
                                 "labels": {"batch.kubernetes.io/job-completion-index": annotation}}})
    assert pod.index is None


@pytest.mark.parametrize("annotation", ["²", "9" * 5000, "x"])
def test_a_jobs_config_index_annotation_never_raises(annotation: str) -> None:
    job = job_view({"metadata": {"name": "j", "annotations": {"scavenger.dev/config-index": annotation}}})
    assert job.config_index == 0


def test_an_exit_code_that_is_not_an_int_reads_as_zero() -> None:
    pod = pod_view({"metadata": {"uid": "u"}, "status": {"containerStatuses": [
        {"name": "c", "state": {"terminated": {"exitCode": "²", "reason": 7}}}]}})
    assert pod.terminations[0].exit_code == 0 and pod.terminations[0].reason == "7"


def _exploding(body: dict[str, Any]) -> Any:
    if body["metadata"]["name"].startswith("bad"):
        raise ValueError("no view of " + body["metadata"]["name"])
    return job_view(body)


def _job(name: str, rv: str = "1") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}", "resourceVersion": rv}}


def test_a_watch_cache_skips_an_object_whose_view_raises_and_keeps_the_others() -> None:
    faults: list[Fault] = []
    changes: list[int] = []
    cache = ObjectCache(make=_exploding, on_fault=faults.append, on_change=lambda: changes.append(1))
    cache.replace([_job("good"), _job("bad-1")])
    assert set(cache.objects()) == {("ns", "good")}
    cache.apply("ADDED", _job("other", rv="5"))
    cache.apply("MODIFIED", _job("bad-2", rv="6"))
    assert set(cache.objects()) == {("ns", "good"), ("ns", "other")}
    assert cache.resource_version == "6", "the watch moves on past the object it could not read"
    assert [(f.kind, f.name, f.reason) for f in faults] == [("Job", "bad-1", "ViewFailed"),
                                                           ("Job", "bad-2", "ViewFailed")]
    assert "no view of bad-2" in faults[1].error


def test_an_object_whose_view_starts_to_raise_is_dropped_not_kept_stale() -> None:
    made: dict[str, bool] = {"fail": False}

    def make(body: dict[str, Any]) -> Any:
        if made["fail"]:
            raise ValueError("unreadable now")
        return job_view(body)

    cache = ObjectCache(make=make)
    cache.apply("ADDED", _job("j"))
    made["fail"] = True
    cache.apply("MODIFIED", _job("j", rv="2"))
    assert cache.objects() == {}
    cache.apply("DELETED", _job("j", rv="3"))  # and its deletion is no error either
    assert cache.objects() == {}


def test_a_pod_cache_skips_a_pod_with_a_non_mapping_metadata_and_goes_on() -> None:
    faults: list[Fault] = []
    cache = PodCache(on_fault=faults.append)
    cache.apply("ADDED", {"metadata": "hostile", "spec": {}})
    cache.apply("ADDED", {"metadata": {"uid": "p", "namespace": "ns", "name": "fine"}})
    assert list(cache.held()) == ["p"] and [f.kind for f in faults] == ["Pod"]


def test_adopted_job_view_is_total_on_its_annotations() -> None:
    job = adopted_job({"metadata": {"name": "j", "annotations": {"scavenger.dev/priority-levels": "²"}}})
    assert job.name == "j"


@pytest.mark.parametrize(("items", "bad"), [
    ([], set()),
    ([1, 2, 3], set()),
    ([1, 2, 3], {2}),
    (list(range(100)), {0, 99}),
    (list(range(37)), {3, 4, 5, 30}),
    ([7], {7}),
])
def test_culprits_finds_every_item_that_fails_on_its_own(items: list[int], bad: set[int]) -> None:
    calls = []

    def fails(part: Any) -> bool:
        calls.append(len(part))
        return any(i in bad for i in part)

    assert sorted(culprits(items, fails)) == sorted(bad)
    assert len(calls) <= 1 + 2 * max(len(bad), 1) * max(len(items), 1).bit_length()


def test_culprits_names_nothing_when_only_a_combination_fails() -> None:
    assert culprits([1, 2], lambda part: len(part) == 2) == []


def test_the_watchdog_fails_once_no_pass_completed_for_its_timeout() -> None:
    clock = [0.0]
    dog = Watchdog(timeout=300, clock=lambda: clock[0])
    assert dog.stalled() is None, "not started: the cache timeout covers the start"
    dog.progressed()
    clock[0] = 300.0
    assert dog.stalled() is None
    clock[0] = 301.0
    assert dog.stalled() == "the decision loop has completed no pass for 301s (more than 300s)"
    dog.progressed()
    assert dog.stalled() is None


def test_describe_is_one_bounded_line() -> None:
    text = describe(ValueError("a\nb" + "x" * 1000))
    assert "\n" not in text and len(text) <= 400 and text.startswith("ValueError: a b")


# --- the pass: one SJ's fault does not stop the others ----------------------------------------------------------

def _faulty(kube: FakeKube) -> tuple[Controller, Metrics]:
    metrics = Metrics()
    return Controller(kube, OperatorConfig(), clock=lambda: NOW, metrics=metrics), metrics  # type: ignore[arg-type]


def _skipped(metrics: Metrics, reason: str) -> float:
    value = metrics.registry.get_sample_value("scavenger_skipped_objects_total",
                                              {"kind": "ScavengerJob", "reason": reason})
    return value or 0.0


def _condition(kube: FakeKube, name: str) -> dict[str, Any] | None:
    for kind, body in kube.calls:
        if kind == "status" and "conditions" in body:
            for c in body["conditions"]:
                if c.get("type") == CONDITION:
                    return dict(c)
    return None


def _names_bad(arg: Any) -> bool:
    """Whether a step's argument is, or holds, the SJ named ``bad``: an SJ object, an observed SJ, a queue entry,
    a list of observed SJs, an admission snapshot."""
    if getattr(arg, "name", None) == "bad" or getattr(arg, "key", None) == "ns/bad":
        return True
    if getattr(getattr(arg, "sj", None), "name", None) == "bad":
        return True
    if isinstance(arg, (list, tuple)):
        return any(_names_bad(item) for item in arg)
    queue = getattr(arg, "queue", None)
    return queue is not None and any(_names_bad(entry) for entry in queue)


@pytest.mark.parametrize(("stage", "target", "reason"), [
    ("decide", (controller_module, "exemptions"), "DecideFailed"),
    ("decide", ("sj_operator.decide", "step"), "DecideFailed"),
    ("observe", (memo_module, "observe_one"), "ObserveFailed"),
    ("admission", (memo_module, "queued"), "AdmissionFailed"),
    ("admission", (memo_module, "decide_pass"), "AdmissionFailed"),
])
def test_an_sj_whose_step_raises_is_skipped_reported_and_the_others_launch(
        monkeypatch: pytest.MonkeyPatch, stage: str, target: tuple[Any, str], reason: str) -> None:
    module, name = target
    if isinstance(module, str):
        import importlib
        module = importlib.import_module(module)
    real = getattr(module, name)

    def broken(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("sj_name") == "bad" or any(_names_bad(arg) for arg in args):
            raise OverflowError("date value out of range")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, broken)
    kube = FakeKube()
    controller, metrics = _faulty(kube)
    bad = sj(name="bad", status={"phase": "Pending"} if stage != "admission" else None)
    run(controller, view(bad, sj(name="good")))
    assert ("job", "good-r1") in kube.calls, "the other SJ launched"
    assert ("job", "bad-r1") not in kube.calls
    assert ("bad", reason) in kube.events, "a Warning Event names the cause"
    condition = _condition(kube, "bad")
    assert condition is not None and condition["status"] == "False" and condition["reason"] == reason
    assert "OverflowError: date value out of range" in condition["message"]
    assert _skipped(metrics, reason) == 1
    run(controller, view(bad, sj(name="good")))
    assert _skipped(metrics, reason) == 1, "counted and reported once while the fault is the same"
    assert kube.events.count(("bad", reason)) == 1


def test_an_sj_handled_again_loses_its_fault_condition() -> None:
    kube = FakeKube()
    controller, _ = _faulty(kube)
    marked = sj(name="work", status={"phase": "Pending", "conditions": [
        {"type": CONDITION, "status": "False", "reason": "DecideFailed", "message": "old"}]})
    run(controller, view(marked))
    written = [body for kind, body in kube.calls if kind == "status"]
    assert written and all(c["type"] != CONDITION for c in written[-1].get("conditions", []))


def test_an_sj_whose_admission_raised_stays_out_of_the_queue_until_its_spec_changes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = memo_module.decide_pass
    passes: list[int] = []

    def broken(snapshot: Any, *args: Any, **kwargs: Any) -> Any:
        passes.append(len(snapshot.queue))
        if any(entry.key == "ns/bad" for entry in snapshot.queue):
            raise ZeroDivisionError("boom")
        return real(snapshot, *args, **kwargs)

    monkeypatch.setattr(memo_module, "decide_pass", broken)
    kube = FakeKube()
    controller, metrics = _faulty(kube)
    bad = sj(name="bad", cpu="9")  # too big to launch: it would wait in the queue
    run(controller, view(bad))
    first = len(passes)
    run(controller, view(bad))
    assert len(passes) == first, "held out of the queue: no admission pass tries it again"
    changed = sj(name="bad", cpu="9")
    object.__setattr__(changed, "generation", 2)
    run(controller, view(changed))
    assert len(passes) > first, "a new generation is tried again"
    assert _skipped(metrics, "AdmissionFailed") == 1


def test_a_fault_whose_condition_cannot_be_written_does_not_hold_up_the_others(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected error writing one SJ's fault condition is logged and the report retried later; the
    fault pool's worker (one here) goes on to the next SJ's report."""
    real = controller_module.exemptions

    def broken(observed: Any, *args: Any, **kwargs: Any) -> Any:
        if any(o.sj.name.startswith("bad") for o in observed):
            raise OverflowError("date value out of range")
        return real(observed, *args, **kwargs)

    monkeypatch.setattr(controller_module, "exemptions", broken)
    monkeypatch.setattr(controller_module, "API_CONCURRENCY", 1)
    kube = FakeKube()
    controller, _ = _faulty(kube)
    real_write = controller.writer.write_fault
    tried: list[str] = []

    async def write_fault(sj_object: Any, fault: Any) -> bool:
        tried.append(sj_object.name)
        if len(tried) == 1:
            raise RuntimeError("a bug in the writer")
        return await real_write(sj_object, fault)

    monkeypatch.setattr(controller.writer, "write_fault", write_fault)
    run(controller, view(sj(name="bad-1", status={"phase": "Pending"}), sj(name="bad-2", status={"phase": "Pending"})))
    assert sorted(tried) == ["bad-1", "bad-2"], "the second report was written after the first one failed"
    assert _condition(kube, "bad") is not None
