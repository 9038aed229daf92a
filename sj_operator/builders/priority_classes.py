"""The ``scheduling.k8s.io/v1`` PriorityClasses of the scavenger band, created at start-up when absent."""

from __future__ import annotations

from typing import Any

from sj_operator.names import MANAGED_BY
from sj_operator.policy.priority import PREEMPTION_POLICY, PRIORITY_BAND


def priority_class_objects() -> list[dict[str, Any]]:
    """The PriorityClass objects of the band, lowest first."""
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name, "labels": dict(MANAGED_BY)},
            "value": value,
            "globalDefault": False,
            "preemptionPolicy": PREEMPTION_POLICY,
            "description": (
                f"ScavengerJob pods, band {step} (higher bands for much-interrupted SJs): below every "
                "other workload and the cluster-autoscaler expendable cutoff; never preempts."
            ),
        }
        for step, (name, value) in enumerate(PRIORITY_BAND.items())
    ]
