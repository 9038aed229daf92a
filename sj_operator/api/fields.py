"""Field types of the ScavengerJob API: errors, durations, timestamps, names, labels and quantities.

Each type is an ``Annotated`` pydantic type that validates at the boundary and carries the JSON schema
the CRD generator turns into the API server's own checks (patterns, lengths).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PlainSerializer,
    StrictStr,
    WithJsonSchema,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from sj_operator.api.bounds import (
    MAX_DURATION_LENGTH,
    MAX_LABEL_VALUE_LENGTH,
    MAX_QUALIFIED_NAME_LENGTH,
    MAX_QUANTITY,
    MAX_QUANTITY_LENGTH,
)
from sj_operator.resources import parse_quantity

# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class InvalidSpec(ValueError):
    """A ScavengerJob spec that can never run; ``field`` is the path of the first offending field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def invalid(message: str, suffix: str = "") -> PydanticCustomError:
    """A validation error whose message is ``message``; ``suffix`` extends the error's location."""
    return PydanticCustomError("sj_invalid", "{reason}", {"reason": message, "suffix": suffix})


# --------------------------------------------------------------------------------------------
# Durations (Go / Kubernetes style) and timestamps
# --------------------------------------------------------------------------------------------

_DURATION_UNITS_NS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign, accepted by Go
    "\u03bcs": 1_000,  # Greek mu, accepted by Go
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_DURATION_UNIT_ALTERNATION = "ns|us|\u00b5s|\u03bcs|ms|s|m|h"
_DURATION_PART = f"([0-9]+(?:\\.[0-9]*)?|\\.[0-9]+)({_DURATION_UNIT_ALTERNATION})"
_DURATION_RE = re.compile(f"(?:{_DURATION_PART})+")
_DURATION_PART_RE = re.compile(_DURATION_PART)
DURATION_PATTERN = f"^(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)({_DURATION_UNIT_ALTERNATION}))+$"
"""Regular expression (valid in Python and ECMA-262) for the positive durations the CRD accepts."""


def parse_duration(text: str) -> timedelta:
    """Parse a Go ``time.ParseDuration`` string such as ``90s``, ``1h30m`` or ``500ms``.

    An optional sign and the bare ``0`` are accepted as in Go. Precision below a microsecond is
    truncated. Raises ``ValueError`` on anything else.
    """
    if not isinstance(text, str):
        raise ValueError(f"duration must be a string, not {type(text).__name__}")
    body = text
    negative = body[:1] == "-"
    if body[:1] in ("-", "+"):
        body = body[1:]
    if body == "0":
        return timedelta(0)
    if not _DURATION_RE.fullmatch(body):
        raise ValueError(f"invalid duration {text!r}: expected a sequence like 90s, 30m, 2h or 1h30m")
    total_ns = sum(
        (Fraction(number) * _DURATION_UNITS_NS[unit] for number, unit in _DURATION_PART_RE.findall(body)),
        Fraction(0),
    )
    microseconds = math.trunc(total_ns / 1000)
    try:
        result = timedelta(microseconds=microseconds)
    except OverflowError as exc:
        raise ValueError(f"invalid duration {text!r}: out of range") from exc
    return -result if negative else result


def format_duration(value: timedelta) -> str:
    """Format a duration in the compact Go style accepted by :func:`parse_duration`.

    Zero components are left out (``1h30m``, ``1m30s``, ``1s500ms``); zero is ``0s``.
    """
    micros = value // timedelta(microseconds=1)
    if micros == 0:
        return "0s"
    sign = "-" if micros < 0 else ""
    remainder = abs(micros)
    parts: list[str] = []
    for unit, size in (("h", 3_600_000_000), ("m", 60_000_000), ("s", 1_000_000), ("ms", 1_000), ("us", 1)):
        count, remainder = divmod(remainder, size)
        if count:
            parts.append(f"{count}{unit}")
    return sign + "".join(parts)


def format_timestamp(value: datetime) -> str:
    """Format a timestamp as Kubernetes does: RFC 3339, UTC, whole seconds, ``Z`` suffix."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


TIMESTAMP_YEARS = range(1900, 9001)
"""The years a timestamp may be in: the arithmetic on them (a checkpoint period, a start timeout, a backoff
added) must stay inside what a ``datetime`` holds (years 1 to 9999); a status that says otherwise is not
one this operator wrote."""


def _normalize_timestamp(value: datetime) -> datetime:
    """Make a timestamp timezone-aware UTC with whole seconds (naive values are taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    if value.year not in TIMESTAMP_YEARS:
        raise invalid(f"must be in the years {TIMESTAMP_YEARS.start} to {TIMESTAMP_YEARS.stop - 1}")
    return value.astimezone(UTC).replace(microsecond=0)


@functools.lru_cache(maxsize=256)
def _known_duration(text: str) -> timedelta:
    """``parse_duration`` by text: SJs of one template, or of none, give a few durations, each one ``timedelta``
    (immutable) for all of them."""
    return parse_duration(text)


def _coerce_duration(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        try:
            return _known_duration(value) if type(value) is str else parse_duration(value)
        except ValueError:
            pass
    raise invalid("must be a duration such as 90s, 30m, 2h or 1h30m")


def _coerce_bounded_duration(value: Any) -> timedelta:
    if isinstance(value, str) and len(value) > MAX_DURATION_LENGTH:
        raise invalid(f"must be at most {MAX_DURATION_LENGTH} characters")
    return _coerce_duration(value)


Duration = Annotated[
    timedelta,
    BeforeValidator(_coerce_bounded_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": DURATION_PATTERN, "maxLength": MAX_DURATION_LENGTH}),
]
"""A Go style duration string in the API, a ``timedelta`` in Python."""


@dataclass(frozen=True)
class DurationRange:
    """``Annotated[Duration, DurationRange(maximum)]``: a duration at most ``maximum`` (and at least ``minimum``,
    when given), checked by the model and, for the maximum, by the CRD with a CEL rule (the pattern alone
    admits durations past any ``timedelta``; it admits no negative one)."""

    maximum: timedelta
    minimum: timedelta | None = None

    def _check(self, value: timedelta) -> timedelta:
        if value > self.maximum:
            raise invalid(f"must be at most {format_duration(self.maximum)}")
        if self.minimum is not None and value < self.minimum:
            raise invalid(f"must be at least {format_duration(self.minimum)}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        top = format_duration(self.maximum)
        rule = {"rule": f"duration(self) <= duration('{top}')", "message": f"must be at most {top}"}
        return {**handler(schema), "x-kubernetes-validations": [rule]}

Timestamp = Annotated[
    datetime,
    AfterValidator(_normalize_timestamp),
    PlainSerializer(format_timestamp, return_type=str),
]
"""An RFC 3339 timestamp in the API, a timezone-aware UTC ``datetime`` in Python."""

# --------------------------------------------------------------------------------------------
# Names, labels and quantities
# --------------------------------------------------------------------------------------------

_DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME_PART_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_QUANTITY_NUMBER = r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
_QUANTITY_SUFFIX = rf"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?{_QUANTITY_NUMBER}))?"
_SIGNED_QUANTITY_RE = re.compile(rf"(\+|-)?{_QUANTITY_NUMBER}{_QUANTITY_SUFFIX}")
QUANTITY_PATTERN = rf"^\+?{_QUANTITY_NUMBER}{_QUANTITY_SUFFIX}$"
"""Regular expression for the non-negative resource quantities the CRD accepts."""


def is_dns_label(value: str) -> bool:
    """Whether ``value`` is an RFC 1123 label (lowercase alphanumerics and '-', at most 63)."""
    return len(value) <= 63 and _DNS_LABEL_RE.fullmatch(value) is not None


def is_dns_subdomain(value: str) -> bool:
    """Whether ``value`` is an RFC 1123 subdomain, the rule for most Kubernetes object names."""
    return len(value) <= 253 and _DNS_SUBDOMAIN_RE.fullmatch(value) is not None


def qualified_name_error(key: str) -> str | None:
    """Why ``key`` is not a valid label/annotation key (``[prefix/]name``), or None if it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (prefix and is_dns_subdomain(prefix)):
        return "prefix must be a DNS subdomain"
    if not name or len(name) > 63 or _QUALIFIED_NAME_PART_RE.fullmatch(name) is None:
        return (
            "name part must be at most 63 characters, alphanumerics, '-', '_' or '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a valid label value (empty, or a qualified name part)."""
    return value == "" or (len(value) <= 63 and _QUALIFIED_NAME_PART_RE.fullmatch(value) is not None)


def _check_dns_label(value: str) -> str:
    if not is_dns_label(value):
        raise invalid("must be a DNS-1123 label (lowercase alphanumerics and '-', at most 63 characters)")
    return value


def _check_dns_subdomain(value: str) -> str:
    if not is_dns_subdomain(value):
        raise invalid("must be a DNS-1123 subdomain (lowercase alphanumerics, '-' and '.')")
    return value


_QUANTITY_CEILING = parse_quantity(MAX_QUANTITY)


def _coerce_quantity(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise invalid("must be a quantity such as 500m, 2 or 1Gi")
    text = str(value)
    if len(text) > MAX_QUANTITY_LENGTH:
        raise invalid(f"must be at most {MAX_QUANTITY_LENGTH} characters")
    if _SIGNED_QUANTITY_RE.fullmatch(text) is None:
        raise invalid(f"{text!r} is not a valid quantity")
    try:
        quantity = parse_quantity(text)
    except ValueError:
        raise invalid(f"{text!r} is not a valid quantity") from None
    if quantity < 0:
        raise invalid("must not be negative")
    if quantity > _QUANTITY_CEILING:
        raise invalid(f"must be at most {MAX_QUANTITY} (10^18)")
    return text


DNSLabel = Annotated[StrictStr, Field(min_length=1, max_length=63), AfterValidator(_check_dns_label)]
DNSSubdomain = Annotated[StrictStr, Field(min_length=1, max_length=253), AfterValidator(_check_dns_subdomain)]
Quantity = Annotated[
    str,
    BeforeValidator(_coerce_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "maxLength": MAX_QUANTITY_LENGTH,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""A Kubernetes resource quantity (``500m``, ``2``, ``1Gi``), kept as the string the user wrote; at most
:data:`MAX_QUANTITY` (checked by the model: the API server's schema bounds its length)."""
QualifiedKey = Annotated[StrictStr, Field(max_length=MAX_QUALIFIED_NAME_LENGTH)]
"""A map key that must be a qualified name (``[prefix/]name``); its form is checked by the map's validator."""
LabelValue = Annotated[StrictStr, Field(max_length=MAX_LABEL_VALUE_LENGTH)]
"""A label value; its form is checked by the map's validator (:func:`check_label_map`)."""


def check_qualified_keys(value: dict[str, str], what: str) -> dict[str, str]:
    """Every key must be a qualified name (``[prefix/]name``); the error names the offending key."""
    for key in value:
        problem = qualified_name_error(key)
        if problem:
            raise invalid(f"{what}: {problem}", f"[{key}]")
    return value


def check_label_map(value: Mapping[str, str], *, reserved_prefix: str | None = None) -> None:
    for key, label_value in value.items():
        problem = qualified_name_error(key)
        if problem:
            raise invalid(f"invalid key: {problem}", f"[{key}]")
        if reserved_prefix and key.startswith(reserved_prefix):
            raise invalid(f"the prefix {reserved_prefix} is reserved for the operator", f"[{key}]")
        if not is_label_value(label_value):
            raise invalid(
                "invalid label value: at most 63 characters, alphanumerics, '-', '_' or '.', "
                "starting and ending with an alphanumeric",
                f"[{key}]",
            )
