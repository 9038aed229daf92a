"""The PodDisruptionBudget that protects an SJ's run while its pods carry ``protected=true``.

The budget allows no disruption of the pods it selects; the operator toggles the label on the run's
pods as the run's level crosses the protection level, so the default scheduler prefers other victims.

It is written as ``minAvailable``, a number: every pod of the run. The disruption controller works out a
budget given as ``maxUnavailable`` (or as a percentage) from the scale subresource of the pods' controller,
which a Job does not have: such a budget never syncs ("jobs.batch does not implement the scale
subresource"), shows ``SyncFailed`` and is retried for as long as it exists. A number of pods to keep is
worked out from the pods the budget selects alone.
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


def protection_budget(namespace: str, sj_name: str, sj_uid: str, pods: int) -> dict[str, Any]:
    """The SJ's budget, ``<sj>-protect``, for a run of ``pods`` pods: all of them available, over its protected
    pods (fewer protected or ready pods than that allow no disruption either)."""
    if pods < 1:
        raise ValueError(f"a run has at least one pod, not {pods}")
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": child_metadata(name=protection_budget_name(sj_name), namespace=namespace, sj_name=sj_name,
                                   sj_uid=sj_uid, labels=dict(MANAGED_BY)),
        "spec": {
            "minAvailable": pods,
            "maxUnavailable": None,  # gone from a budget an earlier version wrote with it, when patched
            "selector": {"matchLabels": {LABEL_SJ: sj_label_value(sj_name), LABEL_PROTECTED: "true"}},
        },
    }
