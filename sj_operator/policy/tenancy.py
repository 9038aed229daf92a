"""What an SJ's namespace allows its runs: the quotas that cap it and weigh its share, and whether a whole gang
fits the namespace's ResourceQuotas.

**Scavenger quotas.** ``effective_quotas`` resolves, per namespace, the cap and fair-share weight the
admission applies (`policy.admission`), so that a tenant's own objects can only tighten them:

- ``hard`` is the tightest, per resource, of every cap that applies: each ScavengerClusterQuota whose
  ``namespaceSelector`` selects the namespace (cluster-scoped: the administrator's), each of the namespace's
  own ScavengerQuotas, and the operator's default cap (``--default-namespace-quota``) for a namespace that
  no cluster quota selects;
- ``weight`` is the smallest of the selecting cluster quotas' weights, else the operator's default
  (``--default-namespace-weight``), lowered (never raised) by the namespace's own ScavengerQuotas.

**ResourceQuotas.** The operator runs SJs with no more than their namespace allows its own users. One pod is
tried against every admission rule of the namespace (Pod Security, quotas, policies) by a server-side dry
run before a run is made; a gang needs all its pods at once, which a dry run of one pod cannot tell, so its
sum is checked here against each quota's ``hard`` less its ``used``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sj_operator.observed import ClusterQuotaView, NamespaceView, QuotaView, SelectorView
from sj_operator.policy.snapshot import NamespaceQuota
from sj_operator.resources import EMPTY, Resources, resources_milli

DEFAULT_CAP_SOURCE = "the operator's --default-namespace-quota"
"""How a message names the default cap."""


@dataclass(frozen=True)
class QuotaDefaults:
    """The operator's quota for every namespace that no ScavengerClusterQuota selects."""

    hard: Resources = field(default_factory=lambda: EMPTY)
    """The default cap per resource (milli-units); none: uncapped."""
    weight: int = 1

    def __post_init__(self) -> None:
        if self.weight < 1:
            raise ValueError(f"the default weight must be at least 1, got {self.weight}")
        object.__setattr__(self, "hard", MappingProxyType(dict(self.hard)))

    @property
    def is_none(self) -> bool:
        """Nothing to apply: no cap, and the weight every namespace has anyway."""
        return not self.hard and self.weight == 1


NO_DEFAULTS = QuotaDefaults()


@dataclass(frozen=True)
class EffectiveQuotas:
    """The quota of each namespace, as the admission applies it."""

    namespaces: Mapping[str, NamespaceQuota] = field(default_factory=dict)
    """The namespaces some ScavengerClusterQuota selects or that have a ScavengerQuota of their own."""
    default: NamespaceQuota | None = None
    """Every other namespace's (the operator's defaults); None: no cap and weight 1."""

    def of(self, namespace: str) -> NamespaceQuota | None:
        return self.namespaces.get(namespace, self.default)


def selects(selector: SelectorView | None, labels: Mapping[str, str]) -> bool:
    """Whether a label selector selects an object with these labels, as Kubernetes reads one: no selector
    selects nothing, an empty one everything; ``NotIn`` holds for an object without the label."""
    if selector is None:
        return False
    if any(labels.get(key) != value for key, value in selector.match_labels):
        return False
    for key, operator, values in selector.match_expressions:
        present = key in labels
        if operator == "In":
            ok = present and labels[key] in values
        elif operator == "NotIn":
            ok = not present or labels[key] not in values
        elif operator == "Exists":
            ok = present
        elif operator == "DoesNotExist":
            ok = not present
        else:
            ok = False  # an operator the schema would have refused: select nothing
        if not ok:
            return False
    return True


def effective_quotas(namespaces: Iterable[NamespaceView], cluster_quotas: Sequence[ClusterQuotaView],
                     namespace_quotas: Sequence[QuotaView], defaults: QuotaDefaults = NO_DEFAULTS) -> EffectiveQuotas:
    """Every namespace's cap and weight from the quotas that apply to it (see the module docstring): the
    tightest cap wins, resource by resource, and a namespace's own ScavengerQuota can lower its weight but
    never raise it. ``namespaces`` is read only for the cluster quotas' selectors."""
    selecting: dict[str, list[ClusterQuotaView]] = {}
    if cluster_quotas:
        ordered = sorted(cluster_quotas, key=lambda q: q.name)
        for ns in namespaces:
            for quota in ordered:
                if selects(quota.selector, ns.labels):
                    selecting.setdefault(ns.name, []).append(quota)
    own: dict[str, list[QuotaView]] = {}
    for q in sorted(namespace_quotas, key=lambda q: (q.namespace, q.name)):
        own.setdefault(q.namespace, []).append(q)
    table = {ns: _resolve(selecting.get(ns, []), own.get(ns, []), defaults)
             for ns in sorted(selecting.keys() | own.keys())}
    default = None if defaults.is_none else NamespaceQuota(
        hard=defaults.hard, weight=defaults.weight, capped_by=dict.fromkeys(defaults.hard, DEFAULT_CAP_SOURCE))
    return EffectiveQuotas(table, default)


def _resolve(selecting: Sequence[ClusterQuotaView], own: Sequence[QuotaView], defaults: QuotaDefaults
             ) -> NamespaceQuota:
    """One namespace's quota. On a tie the cap first named is kept: a cluster quota's before the default
    before the namespace's own, so a message names the administrator's where it can."""
    caps: list[tuple[str, Mapping[str, int]]] = [(f"ScavengerClusterQuota {q.name}", q.hard) for q in selecting]
    if not selecting:
        caps.append((DEFAULT_CAP_SOURCE, defaults.hard))
    caps.extend((f"ScavengerQuota {q.name}", q.hard) for q in own)
    hard: dict[str, int] = {}
    capped_by: dict[str, str] = {}
    for source, cap in caps:
        for resource, amount in cap.items():
            if resource not in hard or amount < hard[resource]:
                hard[resource], capped_by[resource] = amount, source
    weight = min((q.weight for q in selecting), default=defaults.weight)
    weight = min([weight, *(q.weight for q in own)])
    return NamespaceQuota(hard=hard, weight=weight, capped_by=capped_by)

# Quota names a pod's requests or limits count against, and what each counts.
_REQUESTS = {"cpu": "cpu", "requests.cpu": "cpu", "memory": "memory", "requests.memory": "memory",
             "requests.ephemeral-storage": "ephemeral-storage", "ephemeral-storage": "ephemeral-storage"}
_LIMITS = {"limits.cpu": "cpu", "limits.memory": "memory", "limits.ephemeral-storage": "ephemeral-storage"}
_POD_COUNTS = ("pods", "count/pods")


@dataclass(frozen=True)
class ResourceQuotaView:
    """A ResourceQuota as its status shows it: what is allowed and what is used, in milli-units."""

    namespace: str
    name: str
    hard: Mapping[str, int]
    used: Mapping[str, int]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def resource_quota_view(raw: Mapping[str, Any]) -> ResourceQuotaView:
    """A ResourceQuota object (as the API returns it) as a :class:`ResourceQuotaView`."""
    status, metadata = _mapping(raw.get("status")), _mapping(raw.get("metadata"))
    return ResourceQuotaView(name=str(metadata.get("name", "")), namespace=str(metadata.get("namespace", "")),
                             hard=resources_milli(_mapping(status.get("hard"))),
                             used=resources_milli(_mapping(status.get("used"))))


def _gang_usage(name: str, requests: Mapping[str, int], limits: Mapping[str, int], pods: int) -> int | None:
    """What ``pods`` pods of these requests and limits add to quota ``name`` (None: it does not count them)."""
    if name in _POD_COUNTS:
        return pods * 1000
    if name in _REQUESTS:
        return pods * requests.get(_REQUESTS[name], 0)
    if name.startswith("requests."):
        return pods * requests.get(name.removeprefix("requests."), 0)
    if name in _LIMITS:
        return pods * limits.get(_LIMITS[name], 0)
    if name.startswith("limits."):
        return pods * limits.get(name.removeprefix("limits."), 0)
    return None


def _amount(name: str, milli: int) -> str:
    if name in _POD_COUNTS:
        return str(milli // 1000)
    if "cpu" in name:
        return f"{milli}m" if milli % 1000 else str(milli // 1000)
    return str(-(-milli // 1000))


def quota_shortfall(quotas: Sequence[ResourceQuotaView], requests: Mapping[str, int], limits: Mapping[str, int],
                    pods: int) -> str | None:
    """Why ``pods`` pods (each with these requests and limits, milli-units) do not fit the namespace's
    quotas now, naming the quota and the numbers; None when they fit."""
    for quota in quotas:
        for name, hard in sorted(quota.hard.items()):
            adds = _gang_usage(name, requests, limits, pods)
            if adds is None or adds == 0:
                continue
            used = quota.used.get(name, 0)
            if used + adds > hard:
                return (f"ResourceQuota {quota.name}: {pods} pod(s) need {name} {_amount(name, adds)}, "
                        f"{_amount(name, max(hard - used, 0))} of {_amount(name, hard)} is free")
    return None
