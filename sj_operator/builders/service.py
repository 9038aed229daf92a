"""The headless Service that gives a gang's pods stable DNS names (``<job>-<index>.<job>``)."""

from __future__ import annotations

from typing import Any

from sj_operator.names import LABEL_RUN, child_metadata


def build_gang_service(*, job_name: str, namespace: str, sj_name: str, sj_uid: str) -> dict[str, Any]:
    """Named after the run; not-ready addresses are published so members resolve each other while
    they start up."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": child_metadata(name=job_name, namespace=namespace, sj_name=sj_name, sj_uid=sj_uid,
                                   labels={LABEL_RUN: job_name}),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_RUN: job_name},
        },
    }
