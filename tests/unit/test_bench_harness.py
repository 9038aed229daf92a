"""`benchmarks/harness/`: what the cluster benchmarks share, in the parts that run without a cluster (a process
started and stopped, its CPU, metrics scraped and read, py-spy's stacks summed, a Job queued for Kueue, work done in
parallel, the SJs Running as the operator counts them, the pods ready as the Jobs count them, bench_scale's figures,
goals and table)."""
from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks import bench_scale
from benchmarks.harness import kube, kueue, metrics, processes, profiling, progress, scale_report, scavenger

OPERATOR_METRICS = """# HELP scavenger_leader whether this replica leads
scavenger_leader 1.0
scavenger_sjs{phase="Running"} 9.0
scavenger_api_requests_total{operation="create_namespaced_job"} 10.0
scavenger_api_requests_total{operation="patch_namespaced_custom_object_status"} 20.0
scavenger_api_requests_total{operation="list_namespaced_pod"} 3.0
scavenger_event_loop_lag_seconds_bucket{le="0.1"} 5.0
scavenger_event_loop_lag_seconds_bucket{le="1.0"} 7.0
scavenger_event_loop_lag_seconds_bucket{le="5.0"} 9.0
scavenger_event_loop_lag_seconds_bucket{le="+Inf"} 9.0
scavenger_gc_pause_seconds_sum{generation="0"} 0.5
scavenger_gc_pause_seconds_count{generation="0"} 50.0
scavenger_gc_pause_seconds_sum{generation="2"} 1.5
"""


@pytest.fixture
def served() -> Iterator[int]:
    """A port serving `OPERATOR_METRICS` on /metrics and 404 elsewhere."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = OPERATOR_METRICS.encode() if self.path == "/metrics" else b"not here"
            self.send_response(200 if self.path == "/metrics" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


def test_the_operators_metrics_are_scraped_and_read(served: int) -> None:
    scraped = metrics.scrape(served)
    assert scraped["scavenger_leader"] == 1.0
    calls = metrics.calls_by_operation(scraped)
    assert calls == {"create_namespaced_job": 10.0, "patch_namespaced_custom_object_status": 20.0,
                     "list_namespaced_pod": 3.0}
    assert metrics.writes(calls) == {"create_namespaced_job": 10.0, "patch_namespaced_custom_object_status": 20.0}
    lag = metrics.loop_lag(scraped)
    assert lag["loop_lag_worst_le"] == 5.0 and lag["loop_lag_over_1s"] == 2.0
    assert lag["gc_seconds"] == 2.0 and lag["gc_count_gen0"] == 50.0 and lag["gc_seconds_gen1"] == 0.0
    assert metrics.http_get(served, "/readyz", timeout=5)[0] == 404


def test_the_toggles_written_in_time_are_read_from_the_lateness_histogram_between_two_scrapes() -> None:
    """The operator's own histogram: 4 protect toggles since the first scrape (one 50 s late, one 35 s), 1
    unprotect 25 s late; in time means within 40 s and 20 s."""
    from sj_operator.metrics import Metrics
    operator = Metrics()

    def scraped() -> dict[str, float]:
        return {key: float(value) for line in operator.exposition().decode().splitlines()
                if line and not line.startswith("#") for key, _, value in [line.rpartition(" ")]}

    operator.toggle_lateness.labels("protect").observe(3)
    before = scraped()
    for late in (3, 12, 35, 50):
        operator.toggle_lateness.labels("protect").observe(late)
    operator.toggle_lateness.labels("unprotect").observe(25)
    assert metrics.toggle_lateness(before, scraped(), {"protect": 40, "unprotect": 20}) == {
        "toggles_protect": 4, "toggles_protect_worst_le": 60, "toggles_protect_in_time_share": 0.75,
        "toggles_unprotect": 1, "toggles_unprotect_worst_le": 30, "toggles_unprotect_in_time_share": 0}


def test_the_operators_start_timeouts_and_events_dropped_are_read_from_its_counters() -> None:
    """The names the harness reads are the ones the operator exports; a counter an older operator lacks is left
    out, not read as 0."""
    from sj_operator.metrics import Metrics
    operator = Metrics()
    operator.start_timeouts.inc()
    operator.events_dropped.inc(3)
    operator.launch_paced.inc(2.5)
    scraped = {key: float(value) for line in operator.exposition().decode().splitlines()
               if line and not line.startswith("#") for key, _, value in [line.rpartition(" ")]}
    assert metrics.counts(scraped) == {"operator_start_timeouts": 1, "operator_events_dropped": 3,
                                       "operator_events_replaced": 0, "operator_launch_paced": 2.5}
    assert metrics.counts({"scavenger_events_dropped_total": 2.0}) == {"operator_events_dropped": 2}


def test_the_pods_ready_are_counted_as_the_jobs_count_them() -> None:
    """From the API server's JSON (a Job the controller has not synced has no status, or no ``ready`` yet)."""
    jobs = [{"status": {"ready": 3}}, {"status": {}}, {}, {"status": {"ready": 1, "active": 2}}]

    class Batch:
        def list_namespaced_job(self, namespace: str, **kwargs: Any) -> SimpleNamespace:
            assert kwargs == {"resource_version": "0", "_preload_content": False}
            return SimpleNamespace(data=json.dumps({"items": jobs}).encode())

    assert kube.ready_pods(Batch(), "ns") == 4  # type: ignore[arg-type]


def test_the_operators_running_sjs_are_waited_for_by_its_metrics(served: int) -> None:
    assert 0 <= scavenger.wait_running(served, 10, 0.9, timeout=5) < 5  # 9 of 10 run
    with pytest.raises(TimeoutError):
        scavenger.wait_running(served, 10, 0.995, timeout=0, every=0)


def test_a_port_that_answers_no_http_is_not_ready_yet() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]

        def close_at_once() -> None:
            listening.accept()[0].close()

        threading.Thread(target=close_at_once, daemon=True).start()
        with pytest.raises(OSError):
            metrics.http_get(port, "/readyz", timeout=5)


def test_a_process_is_handed_over_once_ready_and_stopped_after(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    script = f"import pathlib, time; pathlib.Path({str(ready)!r}).touch(); print('up', flush=True); time.sleep(60)"
    with processes.started([sys.executable, "-c", script], tmp_path / "log", ready.exists, "a sleeper", 30) as proc:
        assert proc.poll() is None
        assert processes.cpu_seconds(proc.pid) >= 0 and processes.peak_rss_mib(proc.pid) > 0
    assert proc.returncode is not None
    assert (tmp_path / "log").read_text() == "up\n"


def test_a_process_that_ends_before_it_is_ready_fails_the_run(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="a quitter did not start"), \
            processes.started([sys.executable, "-c", "pass"], tmp_path / "log", lambda: False, "a quitter", 30):
        pass


def test_cpu_is_counted_from_the_moment_the_meter_is_made() -> None:
    meter = processes.CpuSince.of_pid(os.getpid())
    sum(i * i for i in range(300_000))
    spent = meter.seconds()
    assert spent is not None and 0 <= spent < 60
    assert processes.CpuSince.of_command("no process has this in its command line " * 2).seconds() is None


def test_the_api_servers_writes_are_read_by_resource_and_verb_whoever_made_them() -> None:
    text = "\n".join([
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
        'apiserver_request_total{code="201",component="apiserver",dry_run="",group="batch",resource="jobs",'
        'scope="resource",subresource="",verb="POST",version="v1"} 7',
        'apiserver_request_total{code="409",component="apiserver",dry_run="",group="batch",resource="jobs",'
        'scope="resource",subresource="",verb="POST",version="v1"} 2',
        'apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",'
        'scope="resource",subresource="status",verb="PATCH",version="v1"} 40',
        'apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",'
        'scope="namespace",subresource="",verb="LIST",version="v1"} 900',
        'apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",'
        'subresource="/healthz",verb="GET",version=""} 3',
        'apiserver_request_duration_seconds_count{verb="POST",resource="jobs"} 99',
    ])
    assert metrics.apiserver_writes(text) == {"jobs POST": 9.0, "pods/status PATCH": 40.0}
    assert metrics.apiserver_writes(text, refused=True) == {"jobs POST 409": 2.0}


def test_the_watches_the_api_server_closed_on_clients_behind_are_read_by_resource() -> None:
    text = "\n".join([
        "# HELP apiserver_terminated_watchers_total [STABLE] Counter of watchers closed due to unresponsiveness",
        'apiserver_terminated_watchers_total{group="",resource="pods"} 4',
        'apiserver_terminated_watchers_total{group="batch",resource="jobs"} 1',
        'apiserver_request_total{code="200",resource="pods",verb="WATCH"} 90',
    ])
    assert metrics.watches_closed(text) == {"pods": 4.0, "jobs.batch": 1.0}
    assert metrics.watches_closed("") == {}


def test_a_process_is_niced_thread_by_thread_for_the_block_and_set_back_after() -> None:
    code = ("import threading, time; "
            "[threading.Thread(target=time.sleep, args=(60,), daemon=True).start() for _ in range(3)]; "
            "print(flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, "bench-niced-probe"], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline()  # its threads run
        tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        assert len(tids) == 4
        was = os.getpriority(os.PRIO_PROCESS, child.pid)  # as this test's (raising it needs no root)
        with processes.niced("bench-niced-probe", min(was + 5, 19)):
            assert {os.getpriority(os.PRIO_PROCESS, t) for t in tids} == {min(was + 5, 19)}
        assert {os.getpriority(os.PRIO_PROCESS, t) for t in tids} == {was}
        with pytest.raises(RuntimeError, match="no process runs"), processes.niced("no-such-process-anywhere", 5):
            pass
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize(("counts", "timeout", "expected"), [
    ([5, 5, 5, 5, 5, 5, 5], 60, (0, 0)),  # still from the start: waits `quiet` only
    ([5, 7, 9, 9, 9, 9, 9, 9, 9], 60, (4, 4)),  # moved twice, the last 4 s in, then still for 10 s
    ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 6, None),  # still moving past the timeout
])
def test_the_pods_are_quiet_once_their_writes_stop_for_a_while(counts: list[int], timeout: float,
                                                               expected: tuple[float, float] | None) -> None:
    now = [0.0]
    left = iter(counts)

    def sleep(seconds: float) -> None:
        now[0] += seconds

    assert kube.until_still(lambda: next(left), quiet=10, timeout=timeout, poll=2, clock=lambda: now[0],
                            sleep=sleep) == expected


def test_the_machines_cpu_is_accounted_to_the_processes_named_the_rest_and_idle() -> None:
    account = processes.CpuAccount({"this test": os.getpid()})
    burnt = processes.CpuSince.of_pid(os.getpid())
    while (burnt.seconds() or 0.0) < 0.2:  # the kernel counts in ticks: at least a few of them
        sum(i * i for i in range(10_000))
    seconds = account.seconds()
    assert seconds["this test"] >= 0.2
    # The cluster's processes are there when a cluster runs on this machine, and left out when none does.
    assert set(seconds) - {name for name, _ in processes.CONTROL_PLANE} == {"this test", "other", "idle"}
    assert seconds["other"] >= 0 and seconds["idle"] >= 0
    busy, _ = processes.machine_cpu()
    assert busy >= seconds["this test"] + seconds["other"] - 0.1


def test_py_spys_stacks_are_summed_by_package_function_and_operation() -> None:
    stacks = ["main (app.py:1);run (sj_operator/controller.py:10) 3",
              "main (app.py:1);CoreV1Api.list_namespaced_pod (kubernetes/client/api/core_v1_api.py:5);"
              "recv (ssl.py:9) 1"]
    package, function, operation = profiling.profile_summary(stacks)
    assert package == "4 samples; own time by package: sj_operator 75.0%, ssl 25.0%"
    assert function == "own time by function: run (sj_operator/controller.py) 75.0%, recv (ssl.py) 25.0%"
    assert operation == "under way, by API operation: list_namespaced_pod 25.0%"
    assert profiling.profile_summary([]) == ["no samples"]


def test_a_job_is_queued_for_kueue_as_its_webhook_would_leave_it() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "labels": {"a": "b"}},
           "spec": {"parallelism": 2}}
    assert kueue.queued(job) == {"apiVersion": "batch/v1", "kind": "Job",
                                 "metadata": {"name": "j", "labels": {"a": "b", kueue.QUEUE_LABEL: "bench"}},
                                 "spec": {"parallelism": 2, "suspend": True}}
    assert job["spec"] == {"parallelism": 2}  # the Job given is left as it was


def test_each_piece_of_work_is_timed_and_followed_as_soon_as_it_is_done() -> None:
    names = [f"unit-{i}" for i in range(20)]
    took, created = progress.timed_creates(lambda i: None, names, 4, "units")
    assert took >= 0 and sorted(created) == sorted(names)
    followed: list[int] = []
    progress.in_parallel_then(lambda i: None, followed.append, 20, 4, "units")
    assert sorted(followed) == list(range(20))

    def fails(i: int) -> None:
        if i == 3:
            raise ValueError(i)

    with pytest.raises(ValueError):  # the followers stop too: nothing is left waiting
        progress.in_parallel_then(fails, followed.append, 20, 4, "units")


def test_the_scale_benchmark_judges_its_goals_on_its_ratios() -> None:
    figures = {"floor_mean_per_second": 145.0, "operator_per_second": 72.5, "operator_peak_rss_mib": 480.0,
               "calls_per_sj": {"create_namespaced_job": 1.0}, "kueue_version": "v0.17.0",
               "work_lost_operator_pod_seconds": 10_000.0, "work_lost_plain_pod_seconds": 40_000.0}
    by_metric = {f["metric"]: f for f in scale_report.scale_figures(figures, 10_000)}
    assert by_metric["operator_to_floor"] == {"metric": "operator_to_floor", "value": 0.5, "unit": "",
                                              "goal": {"min": 0.5}, "met": True}
    assert by_metric["work_lost_to_plain"]["met"] is True and by_metric["work_lost_to_plain"]["value"] == 0.25
    assert by_metric["operator_peak_rss_mib"]["met"] is False  # 480 MiB is over 400 MB
    assert by_metric["calls_per_sj: create_namespaced_job"]["value"] == 1.0 and "kueue_version" not in by_metric
    assert "goal" not in {f["metric"]: f for f in scale_report.scale_figures(figures, 2_000)}["operator_peak_rss_mib"]


FLOOR = {"floor_per_second": 150.0, "floor_after_per_second": 130.0, "floor_mean_per_second": 140.0,
         "floor_seconds": 66.0, "floor_running_seconds": 300.0, "floor_after_running_seconds": 340.0,
         "floor_mean_running_seconds": 320.0}
"""Both floors, timed to the last Job and to 99.5 % of the pods running."""
OPERATOR = {"operator_per_second": 70.0, "operator_seconds": 140.0, "operator_running_seconds": 352.0,
            "latency_p50": 0.5, "latency_p99": 1.5, "operator_peak_rss_mib": 300.0, "loop_lag_worst_le": 0.5,
            "loop_lag_over_1s": 0.0, "operator_start_timeouts": 0.0, "operator_events_dropped": 0.0,
            "operator_events_replaced": 4.0, "work_lost_operator_pod_seconds": 1_000.0,
            "work_lost_plain_pod_seconds": 10_000.0}
"""An operator's run within every goal at 10,000 units: 352 s to running is 1.1 times the floors' mean."""
KUEUE = {"kueue_version": "v0.17.0", "kueue_per_second": 35.0, "kueue_seconds": 290.0, "kueue_running_seconds": 480.0,
         "kueue_latency_p50": 90.0, "kueue_latency_p99": 250.0, "kueue_cpu_seconds": 30.0, "kueue_peak_rss_mib": 250.0}
MET = {"operator_to_floor": True, "operator_running_to_floor": True, "operator_start_timeouts": True,
       "loop_lag_over_1s": True, "operator_events_dropped": True, "work_lost_to_plain": True,
       "operator_peak_rss_mib": True}


@pytest.mark.parametrize(("changed", "units", "judged"), [
    ({}, 10_000, MET),
    ({"operator_running_seconds": 390.0}, 10_000, {**MET, "operator_running_to_floor": False}),  # 1.22 x 320 s
    ({"operator_start_timeouts": 1.0}, 10_000, {**MET, "operator_start_timeouts": False}),
    ({"loop_lag_over_1s": 2.0}, 10_000, {**MET, "loop_lag_over_1s": False}),
    ({"operator_events_dropped": 1.0}, 10_000, {**MET, "operator_events_dropped": False}),
    ({"operator_peak_rss_mib": 382.0}, 10_000, {**MET, "operator_peak_rss_mib": False}),  # over 400 MB
    ({"operator_peak_rss_mib": 382.0}, 2_000, {k: v for k, v in MET.items() if k != "operator_peak_rss_mib"}),
    ({"floor_mean_running_seconds": None, "floor_after_running_seconds": None}, 10_000,  # one floor, 352 / 300 s
     {**MET, "operator_running_to_floor": True}),
    ({"operator_start_timeouts": None, "operator_events_dropped": None}, 10_000,  # an operator without the counters
     {k: v for k, v in MET.items() if k not in ("operator_start_timeouts", "operator_events_dropped")}),
], ids=["all-met", "running-slower-than-1.2x", "a-start-timeout", "loop-lags", "an-event-dropped", "rss-over-400MB",
        "rss-not-judged-at-2000", "one-floor-only", "counters-not-exported"])
def test_the_scale_benchmark_judges_the_goals_of_issue_42(changed: dict[str, float | None], units: int,
                                                          judged: dict[str, bool]) -> None:
    figures: dict[str, Any] = {**FLOOR, **OPERATOR}
    figures.update(changed)
    figures = {k: v for k, v in figures.items() if v is not None}
    by_metric = {f["metric"]: f for f in scale_report.scale_figures(figures, units)}
    assert {name: f["met"] for name, f in by_metric.items() if "goal" in f} == judged


def test_the_running_ratios_are_taken_against_the_mean_of_the_two_floors() -> None:
    figures = {**FLOOR, **OPERATOR, **KUEUE, "ceiling_per_second": 100.0, "ceiling_running_seconds": 336.0,
               "ceiling_shaped_running_seconds": 352.0, "ceiling_shaped_jobs_running_seconds": 344.0,
               "ceiling_watched_running_seconds": 384.0}
    assert scale_report.ratios(figures) == pytest.approx({
        "operator_to_floor": 0.5, "kueue_to_floor": 0.25, "operator_running_to_floor": 1.1,
        "ceiling_running_to_floor": 1.05, "ceiling_shaped_running_to_floor": 1.1,
        "ceiling_shaped_jobs_running_to_floor": 1.075, "ceiling_watched_running_to_floor": 1.2,
        "kueue_running_to_floor": 1.5, "work_lost_to_plain": 0.1})
    by_metric = {f["metric"]: f for f in scale_report.scale_figures(figures, 10_000)}
    assert by_metric["operator_running_to_floor"]["goal"] == {"max": 1.2}
    assert "goal" not in by_metric["kueue_running_to_floor"] and "goal" not in by_metric["ceiling_running_to_floor"]
    assert by_metric["operator_start_timeouts"]["goal"] == {"max": 0}


def test_the_floors_mean_is_of_the_floors_that_ran() -> None:
    """A-B-A: the mean of the two; ``--floor-once``: the first alone, and the table says so."""
    both = {k: FLOOR[k] for k in ("floor_per_second", "floor_after_per_second", "floor_running_seconds",
                                  "floor_after_running_seconds")}
    bench_scale.floor_means(both)
    assert (both["floor_mean_per_second"], both["floor_mean_running_seconds"]) == (140.0, 320.0)
    once = {"floor_per_second": 150.0, "floor_seconds": 66.0, "floor_running_seconds": 300.0}
    bench_scale.floor_means(once)
    assert (once["floor_mean_per_second"], once["floor_mean_running_seconds"]) == (150.0, 300.0)
    result = scale_report.Result(figures={**once, **OPERATOR})
    assert _row(result, "throughput (units/s)")[3] == (
        "0.47 of the floor (run once, before the operator's run: --floor-once)")
    assert "the operator at 1.17 of the floor's (goal <= 1.2)" in _row(result, "99.5% running after (s)")[3]


def _row(result: scale_report.Result, label: str) -> tuple[str, str, str, str]:
    """The plain Jobs', operator's and Kueue's cells of the table's row ``label``, and its note."""
    return next(row[1:] for row in scale_report.rows(result) if row[0] == label)


@pytest.mark.parametrize(("figures", "label", "cells"), [
    ({**FLOOR, **OPERATOR, **KUEUE}, "99.5% running after (s)", ("320", "352", "480")),
    ({**FLOOR, **OPERATOR, **KUEUE}, "the last Job after (s)", ("66.0", "140.0", "290.0")),
    ({**FLOOR, **OPERATOR, **KUEUE}, "create -> Job p50 / p99 (s)", ("0 / 0", "0.5 / 1.5", "90.0 / 250.0")),
    ({**FLOOR, **OPERATOR, **KUEUE}, "start timeouts", ("-", "0", "-")),
    ({**FLOOR, **OPERATOR, **KUEUE}, "Events dropped", ("-", "0", "-")),
    ({**FLOOR, **OPERATOR, **KUEUE}, "peak RSS (MiB)", ("-", "300", "250")),
    ({**FLOOR, **OPERATOR, **KUEUE}, "operator's loop held at most (s)", ("-", "<= 0.5", "-")),
    ({**OPERATOR}, "99.5% running after (s)", ("-", "352", "-")),  # --no-floor, no --kueue
    ({**OPERATOR}, "create -> Job p50 / p99 (s)", ("-", "0.5 / 1.5", "-")),
], ids=["running", "last-job", "create-to-job", "start-timeouts", "events-dropped", "peak-rss", "loop-lag",
        "no-floor-running", "no-floor-create-to-job"])
def test_the_table_shows_the_floor_the_operator_and_kueue_side_by_side(figures: dict[str, Any], label: str,
                                                                        cells: tuple[str, str, str]) -> None:
    assert _row(scale_report.Result(figures=dict(figures)), label)[:3] == cells


def test_the_table_notes_the_ratios_and_the_goals_it_is_judged_on(capsys: pytest.CaptureFixture[str]) -> None:
    figures = {**FLOOR, **OPERATOR, **KUEUE, "operator_events_dropped": 2.0, "ceiling_per_second": 100.0,
               "ceiling_running_seconds": 336.0}
    result = scale_report.Result(figures=figures)
    assert "the operator at 1.10 of the floor's (goal <= 1.2; the floor 300 s before and 340 s after); Kueue 1.50" in (
        _row(result, "99.5% running after (s)")[3])
    assert _row(result, "  99.5% of its pods running after") == ("-", "336 s", "-", "1.05 of the floor's")
    shaped = scale_report.Result(figures={**figures, "ceiling_shaped_per_second": 90.0,
                                          "ceiling_shaped_running_seconds": 352.0})
    assert _row(shaped, "the ceiling of the operator's objects (SJ, its Job and Service)")[1:] == (
        "90.0 units/s", "-", "0.64 of the floor; the operator reached 0.78 of it")
    scale_report.report(result, units=10_000, pods=18_000, high_pods=60, nodes=1_000)
    out = capsys.readouterr().out
    assert "Kueue" in out.splitlines()[2]  # the header has a column for Kueue
    assert "  operator_events_dropped 2 (<= 0) NOT MET" in out
    assert "  operator_running_to_floor 1.1 (<= 1.2) met" in out
    assert "  operator_peak_rss_mib 300 (<= 381.5) met" in out


def test_a_run_writes_what_it_has_after_each_part_to_the_same_file_then_the_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A run stopped part way keeps what its finished parts measured; the whole result replaces it."""
    stamps = iter(["2026-11-28T10:00:00Z", "2026-11-28T11:00:00Z", "2026-11-28T12:00:00Z"])
    real_result = scale_report.results.result
    monkeypatch.setattr(scale_report.results, "result", lambda *a, **k: {**real_result(*a, **k), "date": next(stamps)})
    monkeypatch.setattr(scale_report.results, "RESULTS", tmp_path)
    monkeypatch.setattr(scale_report.results, "default_path",
                        lambda data, directory=None: tmp_path / f"r-{data['date']}.json")
    args = SimpleNamespace(json=None, save=True, no_floor=False, floor_once=True, sjs=10_000, nodes=1_000, plot=None)
    result = scale_report.Result(figures={k: FLOOR[k] for k in ("floor_per_second", "floor_running_seconds")})
    keeper = scale_report.Keeper(args, result, pods=18_000, high_pods=60)  # type: ignore[arg-type]
    keeper.ran("the floor")
    result.figures.update(OPERATOR)
    keeper.ran("the operator")
    [path] = list(tmp_path.glob("*.json"))
    assert path.name == "r-2026-11-28T10:00:00Z.json"  # named when first written, then written over
    part = json.loads(path.read_text())
    assert part["note"].startswith("Part of a run: it stopped after the floor, the operator;")
    assert "--floor-once" in part["note"]
    assert "operator_running_seconds" in {f["metric"] for f in part["figures"]}
    keeper.conclude(units=10_000)
    whole = json.loads(path.read_text())
    assert list(tmp_path.glob("*.json")) == [path] and "Part of a run" not in whole["note"]
    assert "99.5% running after" in capsys.readouterr().out  # the table is printed once, at the end


def test_the_ceiling_of_the_operators_objects_makes_what_the_operator_would() -> None:
    """``--ceiling-as-operator``: each SJ's run as the operator builds it, owned by the SJ, and a gang's Service."""
    def created(name: str, pods: int) -> dict[str, Any]:
        sj = bench_scale.scavenger_job(name, pods, "60s")
        sj["metadata"].update(namespace="ns", uid=f"uid-{name}")
        return sj

    [(kind, job)] = bench_scale.operator_objects(created("sj-00001", 1))
    assert kind == "Job" and job["metadata"]["name"] == "sj-00001-r1"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-sj-00001"
    assert job["spec"]["podFailurePolicy"] and job["spec"]["template"]["spec"]["priorityClassName"].startswith(
        "scavenger-band-")
    gang = bench_scale.operator_objects(created("sj-00002", 4))
    assert [kind for kind, _ in gang] == ["Service", "Job"]
    assert [kind for kind, _ in bench_scale.operator_objects(created("sj-00002", 4), services=False)] == ["Job"]
    assert gang[1][1]["spec"]["completionMode"] == "Indexed" and gang[1][1]["spec"]["parallelism"] == 4


@pytest.mark.parametrize("pods", [1, 4])
def test_the_ceiling_records_each_run_as_the_operators_state_machine_does(pods: int) -> None:
    """``--ceiling-recorded``: a run that starts at once is recorded as the operator records it: one status patch
    (Running, attempt 1, its Job) and its Launched and Running Events, their messages the operator's own."""
    sj = bench_scale.scavenger_job("sj-00003", pods, "60s")
    sj["metadata"].update(namespace="ns", uid="uid-sj-00003")
    job = bench_scale.operator_objects(sj)[-1][1]
    now = datetime(2026, 12, 6, 12, tzinfo=UTC)
    patch, events = bench_scale.operator_record(sj, job, now)
    assert (patch["phase"], patch["attempt"], patch["jobName"]) == ("Running", 1, "sj-00003-r1")
    assert patch["launchedTimestamp"] == patch["runningTimestamps"][0] == "2026-12-06T12:00:00Z"
    assert [reason for reason, _ in events] == ["Launched", "Running"]
    assert events[1][1] == f"run sj-00003-r1: all {pods} pod(s) running"


@pytest.mark.parametrize(("part", "changed"), [
    ("owner", lambda job: "ownerReferences" not in job["metadata"]),
    ("failure-policy", lambda job: not {"podFailurePolicy", "podReplacementPolicy"} & job["spec"].keys()
     and job["spec"]["backoffLimit"] == bench_scale.plain_job("x", 1)["spec"]["backoffLimit"]),
    ("band", lambda job: job["spec"]["template"]["spec"]["priorityClassName"] == bench_scale.LOW),
    ("env", lambda job: "env" not in job["spec"]["template"]["spec"]["containers"][0]
     and job["spec"]["template"]["metadata"] == bench_scale.plain_job("x", 1)["spec"]["template"]["metadata"]),
])
def test_the_ceiling_without_a_part_of_the_operators_job_takes_out_that_part_alone(
        part: str, changed: Callable[[dict[str, Any]], bool]) -> None:
    """``--ceiling-jobs-without PART``: the operator's Job with that one part as the plain Job has it, the rest as
    the operator builds it."""
    sj = bench_scale.scavenger_job("sj-00002", 4, "60s")
    sj["metadata"].update(namespace="ns", uid="uid-sj-00002")
    [(_, whole)] = bench_scale.operator_objects(sj, services=False)
    [(kind, job)] = bench_scale.operator_objects(sj, services=False, without=part)
    assert kind == "Job" and changed(job) and not changed(whole)
    parts = {"owner": [("metadata", "ownerReferences")],
             "failure-policy": [("spec", "podFailurePolicy"), ("spec", "podReplacementPolicy"),
                                ("spec", "backoffLimit")],
             "band": [("pod", "priorityClassName")], "env": [("container", "env"), ("template", "metadata")]}

    def rest(body: dict[str, Any]) -> dict[str, Any]:
        body = json.loads(json.dumps(body))
        places = {"metadata": body["metadata"], "spec": body["spec"], "pod": body["spec"]["template"]["spec"],
                  "container": body["spec"]["template"]["spec"]["containers"][0], "template": body["spec"]["template"]}
        for place, key in parts[part]:
            places[place].pop(key, None)
        return body

    assert rest(job) == rest(whole)  # nothing else moved
    assert set(bench_scale.SHAPE_PARTS) == set(parts)
    with pytest.raises(ValueError, match="not a part"):
        bench_scale.without_part(whole, "labels")


@pytest.mark.parametrize(("holder", "gone"), [
    ("bench_scale pid 41 on here #ab12", True),      # this machine's process, not alive
    ("bench_scale pid 42 on here #ab12", False),     # this machine's process, alive
    ("bench_scale pid 41 on there #ab12", False),    # another machine's: cannot be told, so taken to be there
    ("bench_scale pid x41 on here #ab12", False),    # not a pid
    ("bench_scale pid ²41 on here #ab12", False),    # a digit, but not an ASCII one
    ("bench_scale pid 9999999999 on here #ab12", False),  # past any pid
    ("bench_scale pod 41 on here #ab12", False),     # not the words this writes
    ("bench_scale pid 41 at here #ab12", False),
    ("bench scale pid 41 on here #ab12", False),     # a word too many
    ("bench_scale pid 41 on here", False),           # no token
    ("pid 41 on here #ab12 bench_scale", False),     # reordered
    ("someone else", False),                         # not a holder this writes
    ("", False),
])
def test_a_benchmarks_claim_is_taken_over_only_when_its_holder_is_known_to_be_gone(holder: str, gone: bool) -> None:
    assert kube.claim_gone(holder, "here", alive=lambda pid: pid == 42) is gone


def test_a_claims_holder_is_read_back_as_the_process_it_names() -> None:
    holder = kube.claim_holder("bench_e2e", 41, "here", "ab12")
    assert kube.claim_gone(holder, "here", alive=lambda pid: pid != 41)
    assert not kube.claim_gone(holder, "here", alive=lambda pid: pid == 41)
