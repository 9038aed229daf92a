"""The Helm chart (deploy/chart) rendered with `helm template`, for the tests that compare it with the code.

helm comes from .bin/ (`make binaries`; `make test` builds it before the unit tests) or the PATH; without
it these tests are skipped, saying so.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "chart"
KUBE_VERSION = "1.34.4"


def helm() -> str:
    local = REPO / ".bin" / "helm"
    found = str(local) if local.exists() else shutil.which("helm")
    if found is None:
        pytest.skip("helm is not in .bin/ (make binaries) nor on the PATH: the chart cannot be rendered")
    return found


def render(*sets: str, values: Path | None = None) -> list[dict[str, Any]]:
    """The chart's objects, rendered with ``--set`` for each of ``sets`` (and a values file)."""
    args = [helm(), "template", "scavenger", str(CHART), "--kube-version", KUBE_VERSION]
    if values is not None:
        args += ["-f", str(values)]
    for item in sets:
        args += ["--set", item]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=60).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]
