"""Operator configuration: flags, with environment variables as their defaults.

Every setting is validated at start-up; nonsense is rejected with a message that
names the flag and its environment variable, before the operator touches the API.
"""
from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from gang.hosts import DEFAULT_CLUSTER_DOMAIN
from sj_operator.api import SpecLimits
from sj_operator.api.fields import QUANTITY_PATTERN, is_dns_subdomain, parse_duration, qualified_name_error
from sj_operator.api.parse import check_max_termination_grace, check_min_duration
from sj_operator.api.quota import MAX_WEIGHT
from sj_operator.resources import to_milli
from sj_operator.settings import (
    DEFAULT_AGING_STEP,
    DEFAULT_CACHE_TIMEOUT,
    DEFAULT_LAUNCH_BACKLOG,
    DEFAULT_MAX_PROTECTION,
    DEFAULT_MAX_RETRY_BACKOFF,
    DEFAULT_MAX_TERMINATION_GRACE,
    DEFAULT_MAX_THRASH_BACKOFF,
    DEFAULT_MIN_DURATION,
    DEFAULT_PROTECT_LEVEL,
    DEFAULT_RETRY_BACKOFF,
    DEFAULT_SCHEDULERS,
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_START_TIMEOUT,
    DEFAULT_STARVATION_AFTER,
    DEFAULT_THRASH_BACKOFF,
    DEFAULT_THRESHOLD,
    DEFAULT_TICK,
    Pool,
    check_backoff_cap,
    check_non_negative,
    check_positive,
    check_threshold,
    parse_pools,
)

_SERVICE_REF = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"


class ConfigError(ValueError):
    """A setting is invalid; the message names the flag and environment variable."""


class OperatorConfig(BaseModel):
    """What an operator process runs with. Immutable once parsed."""

    model_config = ConfigDict(frozen=True)

    threshold: float = DEFAULT_THRESHOLD
    """Admit SJs only while all requests stay at or under this share of allocatable."""
    pools: tuple[Pool, ...] = ()
    """Node pools with their own threshold (overflow or burst pools); other nodes keep ``threshold``."""
    start_timeout: timedelta = DEFAULT_START_TIMEOUT
    """A run whose pods are not all running by then is deleted and retried later."""
    retry_backoff: timedelta = DEFAULT_RETRY_BACKOFF
    """First wait after a start timeout, a launch the SJ's namespace refused, or an adopted Job whose SJ the API
    server refused; doubles per one in a row, capped at max_retry_backoff."""
    max_retry_backoff: timedelta = DEFAULT_MAX_RETRY_BACKOFF
    tick: timedelta = DEFAULT_TICK
    """The decision loop runs at least this often, and on every relevant change."""
    cache_timeout: timedelta = DEFAULT_CACHE_TIMEOUT
    """The watch caches must be complete this long after start; a process whose caches are not complete by then
    never campaigns for the Lease, and reports itself unhealthy (``/healthz``) from then on, so that it is
    restarted."""
    stall_timeout: timedelta = DEFAULT_STALL_TIMEOUT
    """Once the loop has started, a process that completes no decision pass for this long reports itself
    unhealthy (``/healthz``), so that it is restarted: whatever the objects, the loop must move."""
    namespaces: tuple[str, ...] = ()
    """Namespaces whose SJs this operator handles; empty means all."""
    schedulers: tuple[str, ...] = tuple(sorted(DEFAULT_SCHEDULERS))
    """The schedulers whose pending pods count toward the threshold (``observed.PodView.unclaimed``)."""
    protect_level: int = DEFAULT_PROTECT_LEVEL
    """Runs at or above this running-priority level are protected by a PodDisruptionBudget."""
    launch_backlog: int = Field(DEFAULT_LAUNCH_BACKLOG, ge=0)
    """Runs made whose Jobs the Job controller has not taken up, or whose pods the scheduler has not looked at, from
    which launches wait for the control plane (`write.launcher`); 0: launches never wait."""
    starvation_after: timedelta = DEFAULT_STARVATION_AFTER
    """A head-of-queue SJ that waited this long stops backfill behind it."""
    peering: str = Field("scavenger", pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    """Name of the Lease that elects the one active replica."""
    lease_namespace: str = Field(default_factory=lambda: os.environ.get("POD_NAMESPACE") or "default",
                                 pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    """Namespace of that Lease (the operator's own namespace when in a cluster)."""
    verbose: bool = False
    identity: str = Field(default_factory=lambda: os.environ.get("POD_NAME") or f"{os.uname().nodename}-{os.getpid()}")
    liveness_port: int | None = Field(None, ge=1, le=65535)
    max_protection: timedelta = DEFAULT_MAX_PROTECTION
    thrash_backoff: timedelta = DEFAULT_THRASH_BACKOFF
    """Wait before the next run after a wasted one (interrupted within its first checkpoint period)."""
    max_thrash_backoff: timedelta = DEFAULT_MAX_THRASH_BACKOFF
    aging_step: timedelta = DEFAULT_AGING_STEP
    """A waiting SJ moves up one interruption's worth in the queue per this much waiting (at most 10)."""
    """The longest a run keeps its protection within one checkpoint period."""
    metrics_port: int = Field(8080, ge=0, le=65535)
    """Serve Prometheus metrics on /metrics and the loop's health on /healthz here; 0 turns it off."""
    max_termination_grace: int = DEFAULT_MAX_TERMINATION_GRACE
    """The most seconds of grace an SJ may ask for (spec.terminationGracePeriodSeconds)."""
    min_duration: timedelta = DEFAULT_MIN_DURATION
    """The shortest spec.duration accepted."""
    webhook_port: int | None = Field(None, ge=1, le=65535)
    """Serve the validating admission webhook (HTTPS) on this port."""
    webhook_service: str | None = Field(None, pattern=_SERVICE_REF)
    """NAMESPACE/NAME of the Service in front of the webhook (in a cluster)."""
    webhook_host: str | None = Field(None, pattern=r"^[A-Za-z0-9.:-]+$")
    """Host (address or DNS name) the API server reaches this process at (outside a cluster)."""
    webhook_secret: str = Field("scavenger-webhook-tls", pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    """Secret (in the lease namespace) holding the webhook's CA and serving certificate."""
    cluster_domain: str = Field(DEFAULT_CLUSTER_DOMAIN, max_length=200,
                                pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    """The cluster's DNS domain: gang members are named ``<pod>.<run>.<namespace>.svc.<cluster_domain>``."""
    default_namespace_quota: dict[str, int] = Field(default_factory=dict)
    """The cap (resource -> milli-units) of every namespace that no ScavengerClusterQuota selects; empty:
    uncapped. A namespace's own ScavengerQuota can only tighten it."""
    default_namespace_weight: int = Field(1, ge=1, le=MAX_WEIGHT)
    """The fair-share weight of every namespace that no ScavengerClusterQuota selects."""

    @property
    def spec_limits(self) -> SpecLimits:
        return SpecLimits(max_termination_grace=self.max_termination_grace, min_duration=self.min_duration)

    @model_validator(mode="after")
    def _webhook_reachable(self) -> OperatorConfig:
        if self.webhook_port is not None and (self.webhook_service is None) == (self.webhook_host is None):
            raise ValueError("the webhook needs exactly one of --webhook-service and --webhook-host")
        return self

    @field_validator("threshold")
    @classmethod
    def _threshold(cls, value: float) -> float:
        return check_threshold(value)

    @field_validator("schedulers")
    @classmethod
    def _schedulers(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        """At least one scheduler, each named once: the threshold would otherwise count no pending pod at all."""
        if not names:
            raise ValueError("must name at least one scheduler (default-scheduler is the cluster's own)")
        if len(set(names)) != len(names):
            raise ValueError(f"names a scheduler twice: {','.join(names)}")
        if (bad := next((n for n in names if not is_dns_subdomain(n)), None)) is not None:
            raise ValueError(f"{bad!r} is not a scheduler name (a pod's schedulerName is a DNS subdomain: "
                             "lower-case letters, digits, '-' and '.')")
        return names

    @field_validator("protect_level")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        return check_non_negative(value)

    @field_validator("max_termination_grace")
    @classmethod
    def _max_termination_grace(cls, value: int) -> int:
        return check_max_termination_grace(value)

    @field_validator("min_duration")
    @classmethod
    def _min_duration(cls, value: timedelta) -> timedelta:
        return check_min_duration(value)

    @field_validator("start_timeout", "tick", "cache_timeout", "stall_timeout", "retry_backoff", "max_retry_backoff",
                     "starvation_after", "max_protection", "max_thrash_backoff", "aging_step")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        return check_positive(value)

    @field_validator("max_retry_backoff")
    @classmethod
    def _not_below_first_backoff(cls, value: timedelta, info: ValidationInfo) -> timedelta:
        first = info.data.get("retry_backoff")
        return value if first is None else check_backoff_cap(value, first)

    @field_validator("max_thrash_backoff")
    @classmethod
    def _not_below_first_thrash_backoff(cls, value: timedelta, info: ValidationInfo) -> timedelta:
        first = info.data.get("thrash_backoff")
        if first is not None and value < first:
            raise ValueError(f"must not be below the thrash backoff ({first.total_seconds():g}s)")
        return value


# flag, environment variable, field, help
_SETTINGS: Sequence[tuple[str, str, str, str]] = (
    ("--threshold", "SJ_THRESHOLD", "threshold",
     "share of total allocatable (per resource) that all requests may reach, 0 <= x <= 1; 0 pauses "
     "scavenging (default 0.70)"),
    ("--pools", "SJ_POOLS", "pools",
     "node pools with their own threshold, NAME:KEY=VALUE[,KEY=VALUE]:THRESHOLD separated by ';', e.g. "
     "'burst:scavenger.dev/pool=burst:1.0'; a node is in the first pool it matches, else in the default pool, "
     "which keeps --threshold (default none)"),
    ("--start-timeout", "SJ_START_TIMEOUT", "start_timeout",
     "how long a run may take to have all its pods running, e.g. 60s (default 60s)"),
    ("--retry-backoff", "SJ_RETRY_BACKOFF", "retry_backoff",
     "first wait before trying again after a run's start timeout, a launch the SJ's namespace refused (a "
     "ResourceQuota, another admission rule) or an adopted Job whose SJ the API server refused; doubles with "
     "each one in a row (default 10s)"),
    ("--max-retry-backoff", "SJ_MAX_RETRY_BACKOFF", "max_retry_backoff", "cap of that wait (default 10m)"),
    ("--tick", "SJ_TICK", "tick", "the decision loop runs at least this often (default 5s)"),
    ("--cache-timeout", "SJ_CACHE_TIMEOUT", "cache_timeout",
     "how long the watch caches may take to fill at start; a process whose caches are not complete by then "
     "never campaigns for the Lease and reports itself unhealthy on /healthz, so it is restarted (default 10m)"),
    ("--stall-timeout", "SJ_STALL_TIMEOUT", "stall_timeout",
     "a process whose decision loop completes no pass for this long reports itself unhealthy on /healthz, so it "
     "is restarted (default 5m)"),
    ("--namespaces", "SJ_NAMESPACES", "namespaces",
     "comma-separated namespaces to handle SJs in; empty for all (default all)"),
    ("--schedulers", "SJ_SCHEDULERS", "schedulers",
     "comma-separated schedulerNames whose pending pods count toward the threshold as demand about to land; a pod "
     "bound to no node that names another scheduler, or has scheduling gates, does not (default default-scheduler)"),
    ("--protect-level", "SJ_PROTECT_LEVEL", "protect_level",
     "running-priority level from which a run is protected by a PodDisruptionBudget (default 1)"),
    ("--launch-backlog", "SJ_LAUNCH_BACKLOG", "launch_backlog",
     "runs made whose Jobs the Job controller has not taken up or whose pods the scheduler has not looked at yet, "
     "from which each launch waits for the control plane (a minute at most each time); 0 for never (default 400)"),
    ("--max-protection", "SJ_MAX_PROTECTION", "max_protection",
     "the longest a run keeps its PodDisruptionBudget within one checkpoint period (default 30m)"),
    ("--thrash-backoff", "SJ_THRASH_BACKOFF", "thrash_backoff",
     "wait before the next run of an SJ whose run was interrupted within its first checkpoint period; doubles "
     "with each such run in a row (default 30s)"),
    ("--max-thrash-backoff", "SJ_MAX_THRASH_BACKOFF", "max_thrash_backoff", "cap of that wait (default 10m)"),
    ("--aging-step", "SJ_AGING_STEP", "aging_step",
     "a waiting SJ moves up in the queue as if interrupted once more per this much waiting, at most 10 times "
     "(default 1h)"),
    ("--starvation-after", "SJ_STARVATION_AFTER", "starvation_after",
     "waiting this long makes the head of the queue stop backfill behind it (default 10m)"),
    ("--peering", "SJ_PEERING", "peering", "name of the Lease electing the one active replica (default scavenger)"),
    ("--lease-namespace", "SJ_LEASE_NAMESPACE", "lease_namespace",
     "namespace of that Lease (default: $POD_NAMESPACE, else default)"),
    ("--liveness-port", "SJ_LIVENESS_PORT", "liveness_port", "serve kopf's /healthz on this port (default off)"),
    ("--metrics-port", "SJ_METRICS_PORT", "metrics_port",
     "serve Prometheus metrics (/metrics) and the decision loop's health (/healthz) on this port; 0 for "
     "off (default 8080)"),
    ("--max-termination-grace", "SJ_MAX_TERMINATION_GRACE", "max_termination_grace",
     "the most seconds an SJ may hold its room after SIGTERM (spec.terminationGracePeriodSeconds; default 300)"),
    ("--min-duration", "SJ_MIN_DURATION", "min_duration", "the shortest spec.duration accepted (default 10s)"),
    ("--webhook-port", "SJ_WEBHOOK_PORT", "webhook_port",
     "serve the validating admission webhook over HTTPS on this port (default off)"),
    ("--webhook-service", "SJ_WEBHOOK_SERVICE", "webhook_service",
     "NAMESPACE/NAME of the Service in front of the webhook, when running in the cluster"),
    ("--webhook-host", "SJ_WEBHOOK_HOST", "webhook_host",
     "address the API server reaches this process at, when running outside the cluster"),
    ("--webhook-secret", "SJ_WEBHOOK_SECRET", "webhook_secret",
     "Secret in the lease namespace holding the webhook's certificates (default scavenger-webhook-tls)"),
    ("--cluster-domain", "SJ_CLUSTER_DOMAIN", "cluster_domain",
     "the cluster's DNS domain, without a trailing dot: gang members reach each other as "
     "<pod>.<run>.<namespace>.svc.<domain>, MPI gangs pin their ssh host key for that domain, and the "
     "webhook's certificate names its Service in it (default cluster.local)"),
    ("--default-namespace-quota", "SJ_DEFAULT_NAMESPACE_QUOTA", "default_namespace_quota",
     "the most the SJ runs of a namespace that no ScavengerClusterQuota selects may request at once, "
     "RESOURCE=QUANTITY separated by ',', e.g. 'cpu=8,memory=32Gi'; the namespace's own ScavengerQuota can only "
     "tighten it (default none: uncapped)"),
    ("--default-namespace-weight", "SJ_DEFAULT_NAMESPACE_WEIGHT", "default_namespace_weight",
     "fair-share weight of a namespace that no ScavengerClusterQuota selects, 1 to 1000; the namespace's own "
     "ScavengerQuota can only lower it (default 1)"),
)

_DURATIONS = {"start_timeout", "tick", "cache_timeout", "stall_timeout", "retry_backoff", "max_retry_backoff",
              "starvation_after",
              "min_duration", "max_protection", "thrash_backoff", "max_thrash_backoff", "aging_step"}


def _convert(field: str, raw: str) -> object:
    if field in _DURATIONS:
        return parse_duration(raw)
    if field == "pools":
        return parse_pools(raw)
    if field in ("namespaces", "schedulers"):
        return tuple(item.strip() for item in raw.split(",") if item.strip())
    if field == "default_namespace_quota":
        return parse_caps(raw)
    return raw


def parse_caps(text: str) -> dict[str, int]:
    """``cpu=8,memory=32Gi`` as milli-units by resource; ValueError naming the item that is not one."""
    caps: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, eq, amount = (part.strip() for part in item.partition("="))
        problem = qualified_name_error(name) if eq else "expected RESOURCE=QUANTITY"
        if problem:
            raise ValueError(f"{item!r}: {problem}")
        if name in caps:
            raise ValueError(f"{text!r}: {name} is given twice")
        try:
            if not re.fullmatch(QUANTITY_PATTERN, amount):
                raise ValueError
            caps[name] = to_milli(amount)
        except (ValueError, ArithmeticError):
            raise ValueError(f"{item!r}: {amount!r} is not a quantity such as 500m, 8 or 32Gi") from None
    return caps


def parse_config(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> OperatorConfig:
    """Flags win over environment variables, which win over defaults."""
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="python -m sj_operator",
        description="Scavenger operator: runs ScavengerJobs on idle capacity below every other workload.",
    )
    for flag, env, field, help_text in _SETTINGS:
        parser.add_argument(flag, dest=field, default=None, help=f"{help_text} [env {env}]")
    parser.add_argument("--verbose", "-v", action="store_true", help="debug logging")
    args = parser.parse_args(argv)

    values: dict[str, object] = {"verbose": bool(args.verbose)}
    # The defaults that come from the pod's environment (Downward API) are read from `environ` too.
    if environ.get("POD_NAMESPACE"):
        values["lease_namespace"] = environ["POD_NAMESPACE"]
    if environ.get("POD_NAME"):
        values["identity"] = environ["POD_NAME"]
    given: dict[str, str] = {}  # as typed, for messages
    for flag, env, field, _ in _SETTINGS:
        raw = getattr(args, field)
        if raw is None and environ.get(env):
            raw = environ[env]
        if raw is None:
            continue
        given[field] = raw
        try:
            values[field] = _convert(field, raw)
        except ValueError as exc:
            raise ConfigError(f"{flag} / {env}: {exc}") from None
    try:
        return OperatorConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        if not err["loc"]:  # a rule across settings
            raise ConfigError(str(err["msg"]).removeprefix("Value error, ")) from None
        field = str(err["loc"][0])
        flag, env = next(((f, e) for f, e, name, _ in _SETTINGS if name == field), (field, field))
        message = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{flag} / {env}: {message} (got {given.get(field, err.get('input'))!r})") from None
