"""Prometheus metrics: what the loop did and what it sees, on ``:8080/metrics`` (``--metrics-port``).

Counters count what this process carried out (a transition counts once its status write succeeded,
so a conflict retried on the next pass is not counted twice); gauges are set by the leader at the end
of every pass and cleared when it stops leading, so only the replica that decides reports them.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sj_operator.faults import Fault

__all__ = ["METRICS_PATH", "Metrics", "serve"]

log = logging.getLogger("sj_operator.metrics")
METRICS_PATH = "/metrics"
_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
_PASS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_TOGGLE_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 40, 60, 120, 300, 600, 1800)
"""Seconds; 20 and 40 are the time a 60 s period of 3 levels protected from level 1 leaves an unprotect and a
protect toggle before the next one is due."""


class Metrics:
    """The operator's metrics in their own registry (one per process; tests make their own)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.pending = Gauge("scavenger_pending_sjs", "SJs waiting to run, by why they wait (Admitted reason)",
                             ["reason"], registry=r)
        self.sjs = Gauge("scavenger_sjs", "SJs by phase", ["phase"], registry=r)
        self.launched = Counter("scavenger_launched_runs_total", "Runs launched (or adopted after a lost write)",
                                registry=r)
        self.interruptions = Counter("scavenger_interruptions_total", "Runs interrupted, by lastInterruptionReason",
                                     ["reason"], registry=r)
        self.finished = Counter("scavenger_finished_sjs_total", "SJs that finished, by phase", ["phase"],
                                registry=r)
        self.start_timeouts = Counter("scavenger_start_timeouts_total",
                                      "Runs deleted because their pods were not all running within the start timeout "
                                      "(it counts from when the scheduler decided about every pod, so pods it has "
                                      "not looked at yet never time a run out); the SJ's StartTimeout Event says "
                                      "which bound applied", registry=r)
        self.admission_wait = Histogram("scavenger_admission_wait_seconds",
                                        "Wait from creation (or the last interruption) to the launch of a run",
                                        buckets=_WAIT_BUCKETS, registry=r)
        self.reconcile = Histogram("scavenger_reconcile_duration_seconds", "Duration of one decision pass",
                                   buckets=_PASS_BUCKETS, registry=r)
        self.loop_lag = Histogram("scavenger_event_loop_lag_seconds",
                                  "How much later than asked the event loop woke a task sleeping 0.5 s: how long "
                                  "other work held the loop (watches, /metrics, /healthz and the webhook wait "
                                  "meanwhile)", buckets=_LAG_BUCKETS, registry=r)
        self.gc_pause = Histogram("scavenger_gc_pause_seconds",
                                  "Pauses of Python's garbage collector, by generation (2: a full collection); "
                                  "the event loop stops meanwhile", ["generation"], buckets=_LAG_BUCKETS,
                                  registry=r)
        self.gc_collected = Counter("scavenger_gc_collected_objects_total",
                                    "Objects Python's garbage collector found unreachable and freed (cyclic garbage, "
                                    "which reference counting cannot free), by generation", ["generation"],
                                    registry=r)
        self.skipped = Counter("scavenger_skipped_objects_total",
                               "Objects the operator could not handle and skipped, by kind and reason (ViewFailed: "
                               "a watched object's view could not be made, counted per event; ObserveFailed, "
                               "DecideFailed, AdmissionFailed, ExplainFailed, WriteFailed, LaunchFailed: a step of "
                               "the pass raised for an SJ, counted once per new fault)", ["kind", "reason"],
                               registry=r)
        self.lost_work = Counter("scavenger_lost_work_seconds_total",
                                 "Estimated work lost to interruptions: time since the run's checkpoint period began",
                                 registry=r)
        self.used = Gauge("scavenger_used_capacity_ratio",
                          "Requests of all pods (but those the scheduler found no node for and nominated none, and "
                          "pending pods no counted scheduler will place: what the threshold counts) over the "
                          "allocatable of schedulable nodes, per resource",
                          ["resource"], registry=r)
        self.api_errors = Counter("scavenger_api_errors_total",
                                  "Kubernetes API calls that failed (each attempt), by operation and HTTP status",
                                  ["operation", "code"], registry=r)
        self.api_requests = Counter("scavenger_api_requests_total",
                                    "Kubernetes API calls made (each attempt), by operation", ["operation"],
                                    registry=r)
        self.launch_paced = Counter("scavenger_launch_paced_seconds_total",
                                    "Seconds launch workers waited for the control plane to take up the runs "
                                    "already made (Jobs not synced by the Job controller, pods not looked at by "
                                    "the scheduler) before making more", registry=r)
        self.launches_dropped = Counter("scavenger_launches_dropped_total",
                                        "Queued launches not made because their SJ changed after the pass that "
                                        "admitted it (deleted, or its spec edited: suspended, resized); the next "
                                        "pass decides it again", registry=r)
        self.events_dropped = Counter("scavenger_events_dropped_total",
                                      "Events not recorded because too many were already waiting to be (Events "
                                      "are best effort: they never hold up a decision)", registry=r)
        self.events_replaced = Counter("scavenger_events_replaced_total",
                                       "Steering Events (Protected, Unprotected) replaced by the SJ's next toggle "
                                       "while waiting to be recorded", registry=r)
        self.events_aggregated = Counter("scavenger_events_aggregated_total",
                                         "Routine steering Events (a run's Protected, a period's Unprotected) counted "
                                         "into their SJ's one Event of that reason instead of recorded anew",
                                         registry=r)
        self.toggle_lateness = Histogram("scavenger_protection_toggle_lateness_seconds",
                                         "How long after the run's clock asked for a routine protection toggle (the "
                                         "level crossed the protecting one, or a period began) its pods' label was "
                                         "written, by toggle (protect, unprotect)", ["toggle"],
                                         buckets=_TOGGLE_BUCKETS, registry=r)
        self.leader = Gauge("scavenger_leader", "1 while this replica is the one that decides", registry=r)
        self._leading: bool | None = None
        self.last_pass = Gauge("scavenger_last_pass_timestamp_seconds", "When the last decision pass ended",
                               registry=r)

    def api_error(self, operation: str, code: int) -> None:
        self.api_errors.labels(operation, str(code)).inc()

    def gc_collection(self, generation: int, seconds: float, collected: int) -> None:
        """One collection of the garbage collector (``pacing.watch_gc``)."""
        self.gc_pause.labels(str(generation)).observe(seconds)
        self.gc_collected.labels(str(generation)).inc(collected)

    def api_request(self, operation: str) -> None:
        self.api_requests.labels(operation).inc()

    def set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        self.leader.set(1 if leading else 0)
        if not leading:  # a follower reports no state: it would only be stale
            for gauge in (self.pending, self.sjs, self.used):
                gauge.clear()

    def set_state(self, pending: Mapping[str, int], phases: Mapping[str, int], used: Mapping[str, float],
                  reasons: Iterable[str], phase_names: Iterable[str]) -> None:
        """The gauges after a pass; every known reason and phase is reported, 0 when none."""
        for reason in {*reasons, *pending}:
            self.pending.labels(reason).set(pending.get(reason, 0))
        for phase in {*phase_names, *phases}:
            self.sjs.labels(phase).set(phases.get(phase, 0))
        self.used.clear()
        for resource, ratio in used.items():
            self.used.labels(resource).set(ratio)

    def skipped_object(self, fault: Fault) -> None:
        self.skipped.labels(fault.kind, fault.reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


async def serve(metrics: Metrics, port: int, unhealthy: Callable[[], str | None]) -> web.AppRunner:
    """Serves ``/metrics`` and ``/healthz`` over HTTP on ``port``: 200, or 503 with why while ``unhealthy()``
    says so."""

    async def scrape(_: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        why = unhealthy()
        return web.Response(text="ok") if why is None else web.Response(status=503, text=why)

    app = web.Application()
    app.router.add_get(METRICS_PATH, scrape)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    log.info("metrics on :%d%s", port, METRICS_PATH)
    return runner
