"""Fallbacks: an SJ whose preferred configuration does not fit runs a smaller one after fallbackAfter."""
from __future__ import annotations

from datetime import timedelta

import pytest

from sj_operator.api import InvalidSpec, parse_spec
from sj_operator.builders.job import build_run_job
from sj_operator.policy.admission import Admission, decide
from sj_operator.policy.snapshot import Shape
from tests.unit import test_admission as adm
from tests.unit import test_controller as ctl

NOW = adm.NOW
M = timedelta(minutes=1)
SMALL = (Shape(2, {"cpu": 1000}),)


def gang(age_min: float, *, fallbacks=SMALL, interrupted_at=None, after=10 * M):
    return adm.sj("ns/g", cpu=1000, pods=8, age_min=age_min, fallbacks=fallbacks, fallback_after=after,
                  waiting_from=interrupted_at)


@pytest.mark.parametrize(("queued", "expected"), [
    (gang(5), []),  # waited 5 of 10 minutes: the preferred shape only
    (gang(11), [Admission("ns/g", ("a", "a"), 1)]),
    (gang(60, interrupted_at=NOW - 2 * M), []),  # interrupted 2 minutes ago: the preferred shape first again
    (gang(11, fallbacks=(Shape(4, {"cpu": 1000}), Shape(2, {"cpu": 1000}))), [Admission("ns/g", ("a", "a"), 2)]),
    (gang(11, fallbacks=(Shape(1, {"cpu": 1000}, {"pool": "overflow"}),)), []),  # no node in that pool
], ids=["too-early", "fallback", "after-interruption", "first-that-fits", "overflow-pool-absent"])
def test_the_first_fallback_that_fits_runs_once_the_preferred_one_waited(queued, expected):
    nodes = [adm.node("a", cpu=4000, used={"cpu": 1000})]  # room for 3 one-CPU pods; the gang needs 8
    assert decide(adm.snapshot(nodes, [queued]), NOW, adm.NO_THRESHOLD) == expected


def test_the_preferred_shape_wins_when_it_fits():
    nodes = [adm.node("a", cpu=16_000)]
    assert decide(adm.snapshot(nodes, [gang(60)]), NOW, adm.NO_THRESHOLD) == [Admission("ns/g", ("a",) * 8, 0)]


def test_a_configuration_is_the_preferred_one_with_the_fallback_over_it():
    spec = parse_spec({"image": "x", "parallelism": 8, "args": ["--big"], "resources": {"requests": {"cpu": "2"}},
                       "fallbacks": [{"parallelism": 2}, {"resources": {"requests": {"cpu": "1"}}, "args": []},
                                     {"nodeSelector": {"pool": "spot"}, "tolerations": [{"key": "spot"}]}],
                       "fallbackAfter": "2m"})
    assert spec.config(0) is spec
    assert (spec.config(1).parallelism, spec.config(1).args) == (2, ("--big",))
    assert spec.config(2).resources.limits == {"cpu": "1"} and spec.config(2).args == ()
    assert spec.config(3).node_selector == {"pool": "spot"} and spec.config(3).parallelism == 8
    assert spec.fallback_after == 2 * M
    with pytest.raises(ValueError, match="no configuration 4"):
        spec.config(4)


@pytest.mark.parametrize(("fallback", "field"), [
    ({"parallelism": 0}, "spec.fallbacks[0].parallelism"),
    ({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}, "spec.fallbacks[0].resources.limits[cpu]"),
    ({"replicas": 2}, "spec.fallbacks[0].replicas"),
])
def test_a_bad_fallback_is_refused_naming_it(fallback, field):
    with pytest.raises(InvalidSpec) as info:
        parse_spec({"image": "x", "fallbacks": [fallback]})
    assert field in str(info.value)


def test_an_mpi_fallback_keeps_a_launcher_and_a_worker():
    with pytest.raises(InvalidSpec, match=r"spec.fallbacks\[0\].parallelism"):
        parse_spec({"image": "x", "parallelism": 4, "mpi": {}, "command": ["mpirun"],
                    "fallbacks": [{"parallelism": 1}]})


def test_the_pods_say_which_configuration_runs():
    spec = parse_spec({"image": "x", "parallelism": 8, "fallbacks": [{"parallelism": 2}]})
    job = build_run_job(sj_name="g", namespace="ns", sj_uid="u", spec=spec.config(1), status_interrupted_count=0,
                        attempt=1, priority_class_name="scavenger-band-0", extra_pod_labels={}, config_index=1)
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SJ_CONFIG_INDEX"] == "1" and job["spec"]["parallelism"] == 2
    plain = build_run_job(sj_name="g", namespace="ns", sj_uid="u", spec=parse_spec({"image": "x"}),
                          status_interrupted_count=0, attempt=1, priority_class_name="scavenger-band-0",
                          extra_pod_labels={})
    assert "SJ_CONFIG_INDEX" not in str(plain), "only SJs with fallbacks get it"


def test_the_loop_launches_the_fallback_and_then_judges_the_run_by_it():
    kube = ctl.FakeKube()
    controller = ctl.Controller(kube, ctl.OperatorConfig(threshold=1.0), clock=lambda: ctl.NOW)  # type: ignore[arg-type]
    waiting = ctl.sj({"phase": "Pending"}, created=ctl.NOW - 20 * M, parallelism=16,
                     fallbacks=[{"parallelism": 2}], fallbackAfter="10m")
    ctl.run(controller, ctl.view(waiting))
    assert ("job", "work-r1") in kube.calls and ("event", "Launched") in kube.calls
    assert "status" not in kube.kinds(), "the run is recorded by a later pass"
    assert kube.made["work-r1"]["metadata"]["annotations"]["scavenger.dev/config-index"] == "1"
    # Running with both pods of the fallback: all of the run's pods run, though the preferred shape has 16.
    job = kube.job("work-r1", created=ctl.NOW)
    pods = tuple(ctl.PodView(namespace="ns", name=f"work-r1-{i}", uid=f"p{i}", sj="work", run="work-r1", node="n1",
                             phase="Running", deleting=False, all_running=True, requests={"cpu": 1000})
                 for i in range(2))
    kube.calls.clear()
    controller2 = ctl.Controller(kube, ctl.OperatorConfig(threshold=1.0), clock=lambda: ctl.NOW)  # type: ignore[arg-type]
    ctl.run(controller2, ctl.view(waiting, jobs={("ns", "work-r1"): job}, run_pods={("ns", "work-r1"): pods},
                                  active=pods))
    recorded = [c for kind, c in kube.calls if kind == "status"]
    assert len(recorded) == 1 and recorded[0]["phase"] == "Running" and recorded[0]["configIndex"] == 1
