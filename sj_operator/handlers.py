"""kopf wiring: watches feed in-memory indexes; one background loop decides.

Importing this module registers the handlers. The handlers only index slim views
of what they see and wake the loop; all decisions happen in `controller.py`, all
API writes in `kube.py`. kopf guarantees that non-index handlers run only after
every index has its initial listing, so the loop starts on a complete cache: it is
released by the first event of the `default` namespace, which every cluster has, once
the operator's own watch caches (`caches.py`: pods, the runs' and adopted Jobs, the
SJs and the ResourceQuotas are listed and watched outside kopf) have their first listings too.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from sj_operator.builders.priority_classes import priority_class_objects
from sj_operator.caches import RESOURCE_QUOTAS_PATH, SJS_PATH, ObjectCache, PodCache, WatchCache
from sj_operator.config import OperatorConfig
from sj_operator.controller import Controller
from sj_operator.decide import ClusterView
from sj_operator.faults import Fault, Watchdog, describe
from sj_operator.kube import Kube
from sj_operator.leader import LeaseElector, campaign_once_ready
from sj_operator.metrics import Metrics, serve
from sj_operator.names import CLUSTER_QUOTA_PLURAL, GROUP, KIND, LABEL_SCAVENGE, LABEL_SJ, QUOTA_PLURAL, VERSION
from sj_operator.observed import (
    AdoptedJob,
    JobView,
    SJObject,
    adopted_job,
    cluster_quota_view,
    job_view,
    namespace_view,
    node_info,
    quota_view,
    remember_disrupted,
    sj_object,
    with_disrupted,
)
from sj_operator.pacing import HeldSampler, LoopHolds, batch_window, collector_paused, watch_gc, watch_lag
from sj_operator.policy.tenancy import ResourceQuotaView, resource_quota_view
from sj_operator.webhook import WebhookServer, webhook_hosts

log = logging.getLogger("sj_operator")


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf's diff base, for change-detecting handlers (`on.create`, `on.update`, `on.field`, ...): none here.

    kopf builds an object's "essence" on every watch event, whatever handlers it has: a deep copy of the
    body, then copies of what is left of it, to diff against the last handled one. This operator only
    indexes (and has one event handler), so that diff is never read; measured over kwok pods, building it
    was more than half of kopf's time per event. This storage builds, keeps and finds nothing.
    `tests/unit/test_handlers.py` fails if a change-detecting handler is ever registered."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config: OperatorConfig = memo.config
    settings.posting.level = logging.WARNING
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.networking.error_backoffs = [1, 2, 5, 10]
    memo.wake = asyncio.Event()
    memo.ready = asyncio.Event()
    memo.shared = {"disrupted": {}}  # handlers get shallow copies of the memo: share through a mutable object
    memo.kube = memo.get("kube") or Kube.from_environment()
    metrics = Metrics()
    memo.kube.on_error = metrics.api_error
    memo.kube.on_request = metrics.api_request
    memo.kube.instance = config.identity
    memo.controller = Controller(memo.kube, config, metrics=metrics, wake=memo.wake.set)
    for pc in priority_class_objects():
        if await memo.kube.ensure_priority_class(pc):
            log.info("created PriorityClass %s (value %s)", pc["metadata"]["name"], pc["value"])
    memo.elector = LeaseElector(memo.kube, name=config.peering, namespace=config.lease_namespace,
                                identity=config.identity, on_change=memo.wake.set)
    shared = memo.shared
    skipped = metrics.skipped_object
    memo.caches = Caches(
        pods=PodCache(on_change=memo.wake.set, remember=lambda pod: remember_disrupted(shared["disrupted"], pod),
                      on_fault=skipped, schedulers=frozenset(config.schedulers)),
        runs=ObjectCache(selector=LABEL_SJ, on_change=memo.wake.set, make=job_view, on_fault=skipped),
        adopted=ObjectCache(selector=f"{LABEL_SCAVENGE}=true", on_change=memo.wake.set, make=adopted_job,
                            on_fault=skipped),
        sjs=ObjectCache(path=SJS_PATH, on_change=memo.wake.set, make=sj_object, kind=KIND, on_fault=skipped),
        resource_quotas=ObjectCache(path=RESOURCE_QUOTAS_PATH, make=resource_quota_view, kind="ResourceQuota",
                                    on_fault=skipped))
    memo.watchdog = Watchdog(config.stall_timeout.total_seconds())
    memo.controller.resource_quotas = memo.caches.resource_quotas.in_namespace
    sjs = memo.caches.sjs
    memo.controller.current_sj = lambda namespace, name: sjs.held().get((namespace, name))
    holds, sampler = LoopHolds(), HeldSampler(threading.get_ident())
    memo.unwatch_held = sampler.start()
    memo.tasks = [
        *(asyncio.create_task(cache.run(memo.kube), name=str(cache)) for cache in memo.caches.all()),
        asyncio.create_task(campaign_once_ready(memo.ready, memo.elector.run, config.cache_timeout.total_seconds()),
                            name="leader election"),
        asyncio.create_task(_decision_loop(memo), name="decision loop"),
        asyncio.create_task(watch_lag(_lag_observer(metrics, holds, sampler.taken), expect=sampler.expect),
                            name="event loop lag"),
    ]

    def collected(generation: int, seconds: float, freed: int) -> None:
        metrics.gc_collection(generation, seconds, freed)
        holds.collection(generation, seconds)

    memo.unwatch_gc = watch_gc(collected)
    if config.metrics_port:
        memo.metrics_server = await serve(metrics, config.metrics_port,
                                          unhealthy=lambda: stopped(memo.tasks) or memo.watchdog.stalled())
    if config.webhook_port is not None:
        memo.tasks.append(asyncio.create_task(_webhook(memo.kube, config).run(), name="admission webhook"))
    log.info("scavenger operator starting (identity %s, threshold %.2f, start timeout %ss, tick %ss, namespaces %s)",
             config.identity, config.threshold, config.start_timeout.total_seconds(), config.tick.total_seconds(),
             ",".join(config.namespaces) or "all")


def _lag_observer(metrics: Metrics, holds: LoopHolds,
                  taken: Callable[[], Counter[str]]) -> Callable[[float], None]:
    """Each measurement of the loop's lag into its histogram, and a lag of a second or more logged with how much of
    it the garbage collector took (`LoopHolds`) and where the loop's thread was meanwhile (``taken``:
    `HeldSampler.taken`)."""
    def observe(late: float) -> None:
        metrics.loop_lag.observe(late)
        if (said := holds.lag(late, where=taken())) is not None:
            log.warning("%s", said)
    return observe


def stopped(tasks: list[asyncio.Task[None]]) -> str | None:
    """Why the process is unhealthy: the first of its long-running tasks that has ended, and how; None while
    all of them run."""
    for task in tasks:
        if task.done():
            error = None if task.cancelled() else task.exception()
            return f"the {task.get_name()} task stopped" + (f": {error}" if error is not None else "")
    return None


def _webhook(kube: Kube, config: OperatorConfig) -> WebhookServer:
    """Every replica serves the webhook (the Service spreads requests); only the leader decides."""
    assert config.webhook_port is not None
    url = None if config.webhook_host is None else f"https://{config.webhook_host}:{config.webhook_port}"
    return WebhookServer(
        kube, port=config.webhook_port, hosts=webhook_hosts(config.webhook_service, config.webhook_host,
                                                                cluster_domain=config.cluster_domain),
        service=config.webhook_service, url=url, secret_namespace=config.lease_namespace,
        secret_name=config.webhook_secret, limits=config.spec_limits, clock=lambda: datetime.now(UTC),
        namespaces=config.namespaces)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    for task in memo.get("tasks", []):
        task.cancel()
    for task in memo.get("tasks", []):
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    if memo.get("controller") is not None:  # Events and steering's writes under way
        memo.controller.drop_launches()  # the launches not begun are the next leader's (never made after the release)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(memo.controller.settle(), timeout=10)
    if memo.get("elector") is not None:
        await memo.elector.release()
    if memo.get("metrics_server") is not None:
        await memo.metrics_server.cleanup()
    if memo.get("unwatch_gc") is not None:
        memo.unwatch_gc()
    if memo.get("unwatch_held") is not None:
        memo.unwatch_held()
    if memo.get("kube") is not None:
        await memo.kube.close()


# --- indexes: what the loop reads -------------------------------------------------------

@kopf.index(GROUP, VERSION, QUOTA_PLURAL)
async def quotas(body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    memo.wake.set()
    return _indexed("quota", "ScavengerQuota", quota_view, body, memo)


@kopf.index(GROUP, VERSION, CLUSTER_QUOTA_PLURAL)
async def cluster_quotas(body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    memo.wake.set()
    return _indexed("quota", "ScavengerClusterQuota", cluster_quota_view, body, memo)


@kopf.index("", "v1", "namespaces")
async def namespaces(body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    """Namespaces' labels, which the cluster quotas' selectors read (kopf watches namespaces anyway: the
    loop is released by the `default` namespace's first event)."""
    memo.wake.set()
    return _indexed("namespace", "Namespace", namespace_view, body, memo)


@kopf.index("", "v1", "nodes")
async def nodes(body: kopf.Body, memo: kopf.Memo, **_: Any) -> dict[str, Any]:
    memo.wake.set()
    return _indexed("node", "Node", node_info, body, memo)


def _indexed(key: str, kind: str, make: Callable[[kopf.Body], Any], body: kopf.Body,
             memo: kopf.Memo) -> dict[str, Any]:
    """An index entry of the object's view; none (the object skipped, the fault counted) when the view
    cannot be made: kopf would otherwise retry the handler on that object for ever."""
    try:
        return {key: make(body)}
    except Exception as exc:
        fault = Fault(kind, str(body.metadata.namespace or ""), str(body.metadata.name or ""), "view", describe(exc))
        log.warning("skipped %s", fault)
        memo.controller.metrics.skipped_object(fault)
        return {}


Indexes = kopf.Index[Any, Any]


# kopf passes indexes as keyword arguments named after them, which its handler protocol cannot express.
@kopf.on.event("", "v1", "namespaces", when=lambda name, **_: name == "default")  # type: ignore[arg-type]
async def indexes_ready(nodes: Indexes, quotas: Indexes, cluster_quotas: Indexes, namespaces: Indexes,
                        memo: kopf.Memo, **_: Any) -> None:
    """Runs only once every index is populated: hands the indexes to the loop once the operator's own watch
    caches (`caches.py`) have their first listings too."""
    if not memo.ready.is_set():
        for cache in memo.caches.all():
            await cache.ready.wait()
        memo.shared["indexes"] = KopfIndexes(nodes, quotas, cluster_quotas, namespaces, memo.caches)
        memo.ready.set()
        log.info("watch caches are complete; the decision loop starts")


@dataclass(frozen=True)
class Caches:
    """The watch caches this process keeps itself (`caches.py`), beside kopf's indexes."""

    pods: PodCache
    runs: ObjectCache[JobView]
    """The Jobs carrying ``scavenger.dev/job-name``: the runs this operator made."""
    adopted: ObjectCache[AdoptedJob]
    """The Jobs labelled ``scavenger.dev/scavenge=true``: taken under the operator's care."""
    sjs: ObjectCache[SJObject]
    """Every SJ of the cluster (the loop handles those of its namespaces)."""
    resource_quotas: ObjectCache[ResourceQuotaView]
    """Every ResourceQuota of the cluster, read by gang launches (they wake nothing)."""

    def all(self) -> tuple[WatchCache, ...]:
        return (self.pods, self.runs, self.adopted, self.sjs, self.resource_quotas)


@dataclass(frozen=True)
class KopfIndexes:
    """kopf's indexes and the operator's own watch caches, as the loop reads them."""

    nodes: Indexes
    quotas: Indexes
    cluster_quotas: Indexes
    namespaces: Indexes
    caches: Caches


def _view(shared: dict[str, Any]) -> ClusterView:
    indexes: KopfIndexes = shared["indexes"]
    caches = indexes.caches
    cluster_quotas = tuple(indexes.cluster_quotas.get("quota", ()))
    jobs = caches.runs.objects()
    run_pods, shared["disrupted"] = with_disrupted(caches.pods.runs(), shared["disrupted"], jobs)
    return ClusterView(
        sjs=tuple(caches.sjs.held().values()),  # the tuple is the pass's copy
        jobs=jobs,
        run_pods=run_pods,
        active_pods=caches.pods.active(),
        nodes=tuple(indexes.nodes.get("node", ())),
        quotas=tuple(indexes.quotas.get("quota", ())),
        adopted=tuple(caches.adopted.held().values()),
        cluster_quotas=cluster_quotas,
        # Only the cluster quotas' selectors read them: none, none read.
        namespaces=tuple(indexes.namespaces.get("namespace", ())) if cluster_quotas else (),
    )


async def _decision_loop(memo: kopf.Memo) -> None:
    controller: Controller = memo.controller
    config: OperatorConfig = memo.config
    await memo.ready.wait()
    watchdog: Watchdog = memo.watchdog
    watchdog.progressed()
    last = 0.0  # how long the last pass took
    while True:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(memo.wake.wait(), timeout=config.tick.total_seconds())
        # Let a burst of watch events land in one pass (for the longest window while the control plane is behind).
        await asyncio.sleep(batch_window(last, behind=controller.unhurried))
        memo.wake.clear()
        controller.metrics.set_leading(memo.elector.leading)
        if not memo.elector.leading:
            controller.drop_launches()
            watchdog.progressed()
            continue
        started = time.perf_counter()
        try:
            with collector_paused():
                await controller.reconcile(_view(memo.shared))
            watchdog.progressed()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("decision pass failed; retrying on the next tick (/healthz fails after %s without a "
                          "completed pass)", config.stall_timeout)
            await asyncio.sleep(1)
        finally:
            last = time.perf_counter() - started
