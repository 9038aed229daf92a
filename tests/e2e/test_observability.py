"""What an operator team sees: metrics that count what happened, why an SJ waits, and `kubectl sj`."""
from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.kube import dedicated_node, free_port, wait_for
from tests.e2e.sj import InProcessOperator, create_sj, run_pods, scrape, sj_spec, status, wait_phase
from tests.e2e.sj import test_config as operator_config

pytestmark = pytest.mark.kwok_only  # every test here runs on dedicated simulated nodes

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / ".venv/bin/kubectl-sj"


def _seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def own_operator(namespace: str, crd: None) -> Iterator[int]:
    """An operator of this namespace alone, so its counters count only this test's SJs."""
    port = free_port()
    op = InProcessOperator(operator_config(namespaces=(namespace,), metrics_port=port))
    op.start()
    yield port
    op.stop()


def test_metrics_count_what_happened_and_waiting_sjs_say_why(api: client.ApiClient, namespace: str,
                                                             own_operator: int) -> None:
    port = own_operator
    with dedicated_node(cpu="4") as node:
        placed = {"nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"]}
        create_sj(api, namespace, "done", sj_spec(run_for="2s", **placed))
        create_sj(api, namespace, "crash", sj_spec(run_for="1s", exit_code=3, **placed))
        create_sj(api, namespace, "victim", sj_spec(run_for=None, cpu="1", duration="1h", **placed))
        create_sj(api, namespace, "paused", sj_spec(suspend=True, **placed))
        create_sj(api, namespace, "huge", sj_spec(cpu="1000", **placed))
        wait_phase(api, namespace, "done", "Succeeded", timeout=60)
        wait_phase(api, namespace, "crash", "Failed", timeout=60)
        wait_phase(api, namespace, "victim", "Running", timeout=60)

        pod = run_pods(api, namespace, "victim-r1")[0].metadata.name
        client.CoreV1Api(api).delete_namespaced_pod(pod, namespace)
        st = wait_for("the victim interrupted and running again", lambda: (s := status(api, namespace, "victim")).get(
            "interruptedCount") == 1 and s.get("phase") == "Running" and s, timeout=90)
        assert st["lastInterruptionReason"] == "Deleted"

        huge = wait_for("huge says why it waits", lambda: next(
            (c for c in status(api, namespace, "huge").get("conditions", []) if c["type"] == "Admitted"), None))
        assert (huge["status"], huge["reason"]) == ("False", "ThresholdReached")
        assert "needs 1 pod of 1000 CPU" in huge["message"] and "allocatable" in huge["message"]
        paused = next(c for c in status(api, namespace, "paused")["conditions"] if c["type"] == "Admitted")
        assert (paused["status"], paused["reason"]) == ("False", "Suspended")
        admitted = next(c for c in st["conditions"] if c["type"] == "Admitted")
        assert admitted["status"] == "True"

        columns = subprocess.run([str(REPO / ".bin/kubectl"), "get", "sj", "-n", namespace, "huge", "victim"],
                                 capture_output=True, text=True, check=True, env=os.environ).stdout.splitlines()
        assert columns[0].split()[:5] == ["NAME", "PHASE", "INTERRUPTIONS", "PRIORITY", "ADMITTED"]
        assert columns[1].split()[0:2] == ["huge", "Pending"] and "ThresholdReached" in columns[1]

        m = wait_for("gauges after a pass", lambda: (s := scrape(port)).get(
            ("scavenger_pending_sjs", (("reason", "ThresholdReached"),))) == 1 and s)
    assert m[("scavenger_launched_runs_total", ())] == 4, "done, crash and the victim's two runs"
    assert m[("scavenger_interruptions_total", (("reason", "Deleted"),))] == 1
    assert m[("scavenger_finished_sjs_total", (("phase", "Succeeded"),))] == 1
    assert m[("scavenger_finished_sjs_total", (("phase", "Failed"),))] == 1
    assert m[("scavenger_pending_sjs", (("reason", "Suspended"),))] == 1
    assert m[("scavenger_sjs", (("phase", "Running"),))] == 1
    assert m[("scavenger_admission_wait_seconds_count", ())] == 4
    assert m[("scavenger_reconcile_duration_seconds_count", ())] > 0
    assert m[("scavenger_event_loop_lag_seconds_count", ())] > 0, "the loop lag is measured while the operator runs"
    assert sum(v for (name, _), v in m.items() if name == "scavenger_gc_pause_seconds_count") > 0, "collections timed"
    assert m[("scavenger_leader", ())] == 1
    assert 0 < m[("scavenger_used_capacity_ratio", (("resource", "cpu"),))] <= 1
    ran = _seconds(st["interruptedTimestamps"][0]) - _seconds(st["runningTimestamps"][0])
    assert m[("scavenger_lost_work_seconds_total", ())] == pytest.approx(ran), "the run lost all it did (1h period)"


def kubectl_sj(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The plugin as kubectl finds it: `kubectl sj ...` with the package's scripts on PATH."""
    env = {**os.environ, "PATH": f"{PLUGIN.parent}:{os.environ['PATH']}"}
    return subprocess.run([str(REPO / ".bin/kubectl"), "sj", *args], capture_output=True, text=True, check=check,
                          env=env)


def test_kubectl_sj_lists_describes_explains_suspends_and_draws(api: client.ApiClient, namespace: str,
                                                                own_operator: int, tmp_path: Path) -> None:
    with dedicated_node(cpu="4") as node:
        placed = {"nodeSelector": node["nodeSelector"], "tolerations": node["tolerations"]}
        create_sj(api, namespace, "worker", sj_spec(run_for=None, cpu="1", duration="1h", **placed))
        create_sj(api, namespace, "huge", sj_spec(cpu="1000", **placed))
        wait_phase(api, namespace, "worker", "Running", timeout=60)
        pod = run_pods(api, namespace, "worker-r1")[0].metadata.name
        client.CoreV1Api(api).delete_namespaced_pod(pod, namespace)
        wait_for("worker interrupted and running again", lambda: (s := status(api, namespace, "worker")).get(
            "interruptedCount") == 1 and s.get("phase") == "Running", timeout=90)
        wait_for("huge waits with a reason", lambda: "ThresholdReached" in kubectl_sj("why", "huge", "-n",
                                                                                       namespace).stdout)

        listed = kubectl_sj("list", "-n", namespace).stdout.splitlines()
        assert listed[0].split() == ["NAME", "PHASE", "ADMITTED", "RUNS", "INTERRUPTIONS", "LOST", "WORK", "AGE"]
        rows = {line.split()[0]: line.split() for line in listed[1:]}
        assert rows["worker"][1:5] == ["Running", "Admitted", "2", "1"]
        assert rows["huge"][1:3] == ["Pending", "ThresholdReached"]
        as_json = json.loads(kubectl_sj("list", "-n", namespace, "-o", "json").stdout)
        assert {r["name"]: r["interruptions"] for r in as_json} == {"huge": 0, "worker": 1}

        described = kubectl_sj("describe", "worker", "-n", namespace).stdout
        timeline = [line.split()[3].rstrip(":") for line in described.split("Timeline:")[1].strip().splitlines()]
        assert timeline == ["created", "launched", "running", "interrupted", "launched", "running"], described
        assert "interrupted (Deleted), lost about" in described
        detail = json.loads(kubectl_sj("describe", "worker", "-n", namespace, "-o", "json").stdout)
        assert [e["what"] for e in detail["timeline"]].count("interrupted") == 1

        why = kubectl_sj("why", "huge", "-n", namespace, "-o", "json").stdout
        assert json.loads(why)["reason"] == "ThresholdReached" and "needs 1 pod of 1000 CPU" in why

        assert "suspended" in kubectl_sj("suspend", "worker", "-n", namespace).stdout
        wait_phase(api, namespace, "worker", "Suspended", timeout=60)
        assert kubectl_sj("why", "worker", "-n", namespace).stdout.startswith("Suspended:")
        kubectl_sj("resume", "worker", "-n", namespace)
        wait_phase(api, namespace, "worker", "Running", timeout=60)

        picture = tmp_path / "timeline.svg"
        kubectl_sj("timeline", "-n", namespace, "-o", str(picture))
        svg = picture.read_text()
        assert svg.startswith("<svg") and f"{namespace}/worker" in svg and f"{namespace}/huge" in svg
        assert svg.count("<title>interrupted") == 1 and svg.count("<title>ran ") == 3

        missing = kubectl_sj("describe", "nobody", "-n", namespace, check=False)
        assert missing.returncode == 1 and "not found" in missing.stderr
