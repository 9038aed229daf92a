"""The chart's webhook configurations (deploy/chart/templates/webhooks.yaml) are the ones the code describes
(`webhook.webhook_configuration`, `webhook.adoption_configuration`), without the caBundle the operator sets."""
from __future__ import annotations

from typing import Any

import pytest

from sj_operator.names import BAND_CLASS_PREFIX
from sj_operator.webhook import adoption_configuration, webhook_configuration
from tests.unit.chart import of_kind, render

SERVICE = "ops/scavenger-webhook"


def _without_labels(configuration: dict[str, Any]) -> dict[str, Any]:
    """The chart labels its objects as Helm's; the rest must be equal."""
    return {**configuration, "metadata": {"name": configuration["metadata"]["name"]}}


@pytest.mark.parametrize("namespaces", [(), ("a", "b")], ids=["all-namespaces", "some"])
def test_the_charts_webhook_configurations_are_the_codes(namespaces: tuple[str, ...]) -> None:
    sets = ["namespace=ops", *([f"namespaces={{{','.join(namespaces)}}}"] if namespaces else [])]
    objects = render(*sets)
    [validating] = of_kind(objects, "ValidatingWebhookConfiguration")
    [mutating] = of_kind(objects, "MutatingWebhookConfiguration")
    assert _without_labels(validating) == _without_labels(webhook_configuration(service=SERVICE, url=None))
    assert _without_labels(mutating) == _without_labels(
        adoption_configuration(service=SERVICE, url=None, namespaces=namespaces))
    assert "caBundle" not in str(objects)


def test_without_the_webhook_the_chart_has_no_webhook_configuration() -> None:
    objects = render("webhook.enabled=false")
    assert not of_kind(objects, "ValidatingWebhookConfiguration") + of_kind(objects, "MutatingWebhookConfiguration")


def test_an_upgrade_rolls_one_replica_at_a_time() -> None:
    """A new replica is ready before an old one goes: the webhooks always have a server (the kind stage runs a
    `helm upgrade` while SJs run)."""
    deployment, = of_kind(render(), "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


@pytest.mark.parametrize(("sets", "expected"), [
    ((), None),
    (("image.pullSecrets={regcred}",), [{"name": "regcred"}]),
    (("image.pullSecrets={a,b}",), [{"name": "a"}, {"name": "b"}]),
])
def test_the_image_is_pulled_with_the_secrets_named(sets: tuple[str, ...],
                                                    expected: list[dict[str, str]] | None) -> None:
    deployment, = of_kind(render(*sets), "Deployment")
    assert deployment["spec"]["template"]["spec"].get("imagePullSecrets") == expected


def test_the_band_guard_guards_the_classes_the_operator_counts_usage_by() -> None:
    """A namespace's usage is counted from its pods whose class starts with `names.BAND_CLASS_PREFIX`, trusting that
    only the operator's Jobs make such pods: the guard must refuse that same prefix to everyone else."""
    [policy] = [p for p in of_kind(render(), "ValidatingAdmissionPolicy")
                if p["metadata"]["name"] == "scavenger-band-guard"]
    [in_band] = [v["expression"] for v in policy["spec"]["variables"] if v["name"] == "inBand"]
    assert f"priorityClassName.startsWith('{BAND_CLASS_PREFIX}')" in in_band
