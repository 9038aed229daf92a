"""Order statistics of measured values, the same way in every benchmark."""
from __future__ import annotations

from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The value at quantile ``q`` of ``sorted_values`` (nearest rank, no interpolation: a value measured)."""
    return sorted_values[min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))]
