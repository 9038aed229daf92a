"""Helpers the policy tests use to state expectations; the operator itself never needs them."""
from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from sj_operator.api import Toleration
from sj_operator.controller import Controller
from sj_operator.decide import ClusterView
from sj_operator.resources import Resources, accumulate, freeze, to_milli


def add(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """Per-resource sum ``a + b``."""
    return freeze(accumulate(dict(a), b))


def scale(res: Mapping[str, int], n: int) -> Resources:
    """Every amount of ``res`` multiplied by ``n``."""
    return freeze({name: amount * n for name, amount in res.items()})


def fits(need: Mapping[str, int], free: Mapping[str, int]) -> bool:
    """True when every positive amount of ``need`` is at most the same resource in ``free``."""
    return all(amount <= free.get(name, 0) for name, amount in need.items() if amount > 0)


def parse_resources(quantities: Mapping[str, str | int | float | Decimal] | None) -> Resources:
    """A Kubernetes resource list as milli-unit resources."""
    return freeze({name: to_milli(q) for name, q in (quantities or {}).items()})


def tol(key: str = "", operator: str | None = None, value: str | None = None, effect: str | None = None) -> Toleration:
    """A toleration, positionally as Kubernetes writes it (key, operator, value, effect)."""
    fields = {"key": key or None, "operator": operator, "value": value or None, "effect": effect or None}
    return Toleration.model_validate({k: v for k, v in fields.items() if v is not None})


POD_FAILURE_POLICY = {"rules": [
    {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
    {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "NotIn", "values": [0]}},
]}
"""Every run's Job: a disruption or the app's failure fails it at once (the Job never makes a replacement)."""


async def settled_pass(controller: Controller, view: ClusterView) -> None:
    """One decision pass, then until its background writes (steering, Events) are done."""
    await controller.reconcile(view)
    await controller.settle()
