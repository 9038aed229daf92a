"""The PodDisruptionBudget that protects an SJ's run while its pods carry ``protected=true``.

The budget allows no disruption of the pods it selects; the operator toggles the label on the run's
pods as the run's level crosses the protection level, so the default scheduler prefers other victims.
"""

from __future__ import annotations

from typing import Any

from sj_operator.names import (
    LABEL_PROTECTED,
    LABEL_SJ,
    MANAGED_BY,
    child_metadata,
    protection_budget_name,
    sj_label_value,
)


def protection_budget(namespace: str, sj_name: str, sj_uid: str) -> dict[str, Any]:
    """The SJ's budget, ``<sj>-protect``: ``maxUnavailable: 0`` over its protected pods."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": child_metadata(name=protection_budget_name(sj_name), namespace=namespace, sj_name=sj_name,
                                   sj_uid=sj_uid, labels=dict(MANAGED_BY)),
        "spec": {
            "maxUnavailable": 0,
            "selector": {"matchLabels": {LABEL_SJ: sj_label_value(sj_name), LABEL_PROTECTED: "true"}},
        },
    }
