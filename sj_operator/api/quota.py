"""ScavengerQuota: what one namespace's SJs may use at once, and its fair share of the scavenged room."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from sj_operator.api.bounds import MAX_RESOURCES
from sj_operator.api.fields import QualifiedKey, Quantity, check_qualified_keys

MAX_WEIGHT = 1000


class ScavengerQuotaSpec(BaseModel):
    """The namespace's cap and weight."""

    model_config = ConfigDict(frozen=True, extra="forbid", alias_generator=to_camel)

    hard: dict[QualifiedKey, Quantity] = Field(
        default_factory=dict, max_length=MAX_RESOURCES,
        description="resource -> quantity: the most this namespace's SJ runs may request at once.")
    weight: int = Field(default=1, ge=1, le=MAX_WEIGHT,
                        description="Fair-share weight between namespaces: room is shared in proportion to it.")

    @field_validator("hard")
    @classmethod
    def _resource_names(cls, value: dict[str, str]) -> dict[str, str]:
        return check_qualified_keys(value, "invalid resource name")
