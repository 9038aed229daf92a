"""Resource amounts, once: Kubernetes quantities as integers in milli-units, and sums of them.

Every amount is an ``int`` in milli-units, whatever the resource: ``cpu: 500m`` is 500, ``memory: 1Gi``
is 1073741824000 and ``nvidia.com/gpu: 1`` is 1000. One unit for all resources keeps the arithmetic
exact and uniform. A resource missing from a mapping counts as 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from decimal import Decimal
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from kubernetes.utils import quantity as _quantity

from gang.placement import Resources

EMPTY: Resources = MappingProxyType({})
MOST = 10**21
"""The largest amount a watched object is read with (milli-units: 10^18 units, more than any node holds): a
pod may ask for 10^5000 CPUs, and the capacity ratios made of such sums would not fit a float."""

__all__ = ["EMPTY", "MOST", "Resources", "accumulate", "format_amount", "freeze", "parse_quantity", "resources_milli",
           "sub", "to_milli", "total"]

_BINARY = (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))
_FLOAT_MOST = 10**300
"""Milli-units from which ``format_amount`` leaves floats (which end near 1.8e308) for decimals."""


def parse_quantity(quantity: str | int | float | Decimal) -> Decimal:
    """A Kubernetes quantity (``"500m"``, ``"1Gi"``, ``2``) as a number; ValueError when it is none."""
    value: Decimal = _quantity.parse_quantity(quantity)  # type: ignore[no-untyped-call]
    return value


@lru_cache(maxsize=4096)
def to_milli(quantity: str | int | float | Decimal) -> int:
    """Kubernetes quantity in milli-units, rounded up like ``MilliValue``, at most `MOST` either way (a quota's
    ``1e999990``, which its schema's pattern admits, would take a minute of CPU made into an int before it
    was cut down, and the watch and the loop with it). Remembered for the last 4,096 quantities: a cluster's
    pods and SJs repeat a few dozen ("500m", "1Gi"), and the watches and passes convert them tens of thousands
    of times in a burst. ValueError for no quantity; ArithmeticError past what a decimal holds."""
    milli = parse_quantity(quantity) * 1000
    if not milli.is_finite():
        raise ValueError(f"not a finite quantity: {quantity!r}")
    return MOST if milli >= MOST else -MOST if milli <= -MOST else math.ceil(milli)


def resources_milli(raw: Mapping[str, Any] | None) -> dict[str, int]:
    """A resource list in milli-units; an unparsable or negative quantity is skipped (for objects the API
    server already validated: a watch stream must never stop on one odd field)."""
    out: dict[str, int] = {}
    for name, qty in (raw or {}).items():
        try:
            amount = to_milli(qty)
        except (ValueError, TypeError, ArithmeticError):
            continue
        if amount >= 0:
            out[name] = min(amount, MOST)
    return out


def freeze(res: Mapping[str, int] | None) -> Resources:
    """A read-only copy of ``res`` without zero entries; amounts must be ``int``."""
    if not res:
        return EMPTY
    frozen: dict[str, int] = {}
    for name, amount in res.items():
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise TypeError(f"resource {name!r}: amount must be an int in milli-units, got {amount!r}")
        if amount:
            frozen[name] = amount
    return MappingProxyType(frozen)


def accumulate(into: dict[str, int], res: Mapping[str, int]) -> dict[str, int]:
    """Adds ``res`` into ``into``, per resource, and returns it."""
    for name, amount in res.items():
        into[name] = into.get(name, 0) + amount
    return into


def total(resources: Iterable[Mapping[str, int]]) -> Resources:
    """Per-resource sum of many resource mappings."""
    acc: dict[str, int] = {}
    for res in resources:
        accumulate(acc, res)
    return freeze(acc)


def sub(a: Mapping[str, int], b: Mapping[str, int]) -> Resources:
    """Per-resource difference ``a - b``; amounts may become negative."""
    diff = dict(a)
    for name, amount in b.items():
        diff[name] = diff.get(name, 0) - amount
    return freeze(diff)


def format_amount(resource: str, milli: int) -> str:
    """An amount for people: ``format_amount("cpu", 1500)`` is ``"1.5 CPU"``, memory in binary units
    (``"1.5Gi"``), anything else as a number with its resource name (``"2 nvidia.com/gpu"``). An amount past
    what a float holds (a ScavengerQuota's, which no webhook bounds) is written as ``1.000e+400``."""
    if abs(milli) >= _FLOAT_MOST:
        number = f"{Decimal(milli).scaleb(-3):.3e}"
        return number if resource in ("memory", "ephemeral-storage") else (
            f"{number} CPU" if resource == "cpu" else f"{number} {resource}")
    if resource in ("memory", "ephemeral-storage"):
        units = milli / 1000
        for suffix, size in _BINARY:
            if abs(units) >= size:
                return f"{units / size:.3g}{suffix}" if units % size else f"{int(units) // size}{suffix}"
        return f"{units:g}"
    number = f"{milli / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{number} CPU" if resource == "cpu" else f"{number} {resource}"
