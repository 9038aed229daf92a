"""ScavengerQuota and ScavengerClusterQuota: caps on what a namespace's SJs may use at once, and its fair
share of the scavenged room.

A ``ScavengerClusterQuota`` (cluster-scoped, so the admin's: tenants normally have no cluster-scope
rights) applies its ``hard`` and ``weight`` to every namespace its ``namespaceSelector`` selects. A
``ScavengerQuota`` (namespaced, so possibly the tenant's own) only ever tightens: its ``hard`` is one more
cap on its namespace and its ``weight`` can only lower the namespace's. `policy.tenancy.effective_quotas`
resolves them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from sj_operator.api.bounds import MAX_RESOURCES
from sj_operator.api.fields import (
    LabelValue,
    QualifiedKey,
    Quantity,
    check_label_map,
    check_qualified_keys,
    invalid,
    qualified_name_error,
)

MAX_WEIGHT = 1000
MAX_SELECTOR_TERMS = 32

_CEL_VALUES: dict[str, Any] = {"x-kubernetes-validations": [
    {"rule": "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 "
             ": !has(self.values) || size(self.values) == 0",
     "message": "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
     "fieldPath": ".values"},
]}


def _resource_names(value: dict[str, str]) -> dict[str, str]:
    return check_qualified_keys(value, "invalid resource name")


Caps = Annotated[dict[QualifiedKey, Quantity], Field(max_length=MAX_RESOURCES), AfterValidator(_resource_names)]
"""resource -> quantity, each name a qualified name."""


class _QuotaModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)


class LabelSelectorRequirement(_QuotaModel):
    """One requirement of a label selector, as in a Kubernetes LabelSelectorRequirement."""

    model_config = ConfigDict(json_schema_extra=_CEL_VALUES)

    key: QualifiedKey = Field(min_length=1, description="The label key the requirement applies to.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In, NotIn, Exists or DoesNotExist.")
    values: tuple[LabelValue, ...] | None = Field(
        default=None, max_length=MAX_SELECTOR_TERMS,
        description="Label values: non-empty for In and NotIn, empty for Exists and DoesNotExist.")

    @model_validator(mode="after")
    def _consistent(self) -> LabelSelectorRequirement:
        problem = qualified_name_error(self.key)
        if problem:
            raise invalid(f"invalid key: {problem}", ".key")
        if self.operator in ("In", "NotIn") and not self.values:
            raise invalid(f"must be non-empty with {self.operator}", ".values")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise invalid(f"must be empty with {self.operator}", ".values")
        return self


class LabelSelector(_QuotaModel):
    """A standard label selector: every ``matchLabels`` pair and every ``matchExpressions`` requirement
    must hold. An empty selector selects every namespace."""

    match_labels: dict[QualifiedKey, LabelValue] = Field(
        default_factory=dict, max_length=MAX_SELECTOR_TERMS,
        description="Labels the namespace must carry, with these values.")
    match_expressions: tuple[LabelSelectorRequirement, ...] = Field(
        default=(), max_length=MAX_SELECTOR_TERMS, description="Requirements the namespace's labels must meet.")

    @field_validator("match_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        check_label_map(value)
        return value


class ScavengerQuotaSpec(_QuotaModel):
    """The namespace's cap and weight."""

    hard: Caps = Field(
        default_factory=dict,
        description="resource -> quantity: the most this namespace's SJ runs may request at once.")
    weight: int = Field(default=1, ge=1, le=MAX_WEIGHT,
                        description="Fair-share weight between namespaces: room is shared in proportion to it.")


class ScavengerClusterQuotaSpec(_QuotaModel):
    """The cap and weight of every namespace the selector selects."""

    namespace_selector: LabelSelector | None = Field(
        default=None,
        description="The namespaces this quota applies to; an empty selector ({}) selects every namespace, "
                    "none selects no namespace.")
    hard: Caps = Field(
        default_factory=dict,
        description="resource -> quantity: the most each selected namespace's SJ runs may request at once.")
    weight: int = Field(default=1, ge=1, le=MAX_WEIGHT,
                        description="Fair-share weight of each selected namespace: room is shared in proportion "
                                    "to it.")
