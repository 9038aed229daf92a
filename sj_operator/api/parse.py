"""Parsing at the boundary: a raw spec becomes a typed spec or an :class:`InvalidSpec` that names the
first offending field (``spec.volumes[1].mountPath``); a raw status is read tolerantly and never fails.

The same function serves every reader of a spec, so what the loop refuses is what the API refuses.
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from sj_operator.api.bounds import MAX_DURATION, MAX_SPEC_BYTES, MAX_TERMINATION_GRACE_SECONDS
from sj_operator.api.fields import InvalidSpec, format_duration
from sj_operator.api.frozen import SHARING
from sj_operator.api.spec import DURATION_FLOOR_MESSAGE, MIN_DURATION, ScavengerJobSpec
from sj_operator.api.status import ScavengerJobStatus
from sj_operator.settings import DEFAULT_MAX_TERMINATION_GRACE, DEFAULT_MIN_DURATION, check_non_negative


@dataclass(frozen=True)
class SpecLimits:
    """Bounds the cluster's operator sets on every SJ (operator flags), on top of the model's rules.

    They protect the product's promise: an SJ gives its room back within ``max_termination_grace``
    seconds of being told to, and its ``duration`` is long enough to be worth scavenging.
    """

    max_termination_grace: int = DEFAULT_MAX_TERMINATION_GRACE
    min_duration: timedelta = DEFAULT_MIN_DURATION

    def __post_init__(self) -> None:
        check_max_termination_grace(self.max_termination_grace)
        check_min_duration(self.min_duration)


def check_max_termination_grace(value: int) -> int:
    """A cluster maximum for ``spec.terminationGracePeriodSeconds``: zero or more, and within the model's own
    (the CRD's) ceiling, :data:`~sj_operator.api.bounds.MAX_TERMINATION_GRACE_SECONDS`."""
    check_non_negative(value)
    if value > MAX_TERMINATION_GRACE_SECONDS:
        raise ValueError(f"must be at most {MAX_TERMINATION_GRACE_SECONDS}, got {value}")
    return value


def check_min_duration(value: timedelta) -> timedelta:
    """A cluster minimum for ``spec.duration`` must lie above the model's own floor and at most its ceiling
    (:data:`~sj_operator.api.bounds.MAX_DURATION`), so that some duration is accepted."""
    if value <= MIN_DURATION:
        raise ValueError(DURATION_FLOOR_MESSAGE)
    if value > MAX_DURATION:
        raise ValueError(f"must be at most {format_duration(MAX_DURATION)}")
    return value


DEFAULT_LIMITS = SpecLimits()


def _plain(value: Any) -> Any:
    """Deep copy into plain dicts and lists, dropping null map values as the API server does."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def parse_spec(raw: Mapping[str, Any] | None, limits: SpecLimits = DEFAULT_LIMITS, *,
               share: bool = True) -> ScavengerJobSpec:
    """Default and validate a raw ``spec``; raise :class:`InvalidSpec` naming the first bad field.

    The admission webhook and the decision loop both call this, with the operator's ``limits``. Its nested
    models (resources, tolerations, env vars, volumes, fallbacks...) are the instances already made for equal
    content (`frozen.shared`); ``share=False``: made anew (the same values).
    """
    if raw is not None and not isinstance(raw, Mapping):
        raise InvalidSpec("spec", "must be an object")
    plain = _plain(raw or {})
    size = spec_size(plain)
    if size > MAX_SPEC_BYTES:
        raise InvalidSpec("spec", f"must be at most {MAX_SPEC_BYTES} bytes serialized as JSON (is {size})")
    try:
        spec = ScavengerJobSpec.model_validate(plain, context=SHARING if share else None)
    except ValidationError as exc:
        error = _as_invalid_spec(exc)
        # Below the model's own floor is below the cluster's minimum too, and above the model's ceiling above
        # the cluster's maximum: say the one that applies.
        if error.message == DURATION_FLOOR_MESSAGE:
            raise _too_short(limits) from None
        if error.field == _GRACE and error.message == _GRACE_CEILING_MESSAGE:
            raise _too_much_grace(limits) from None
        raise error from None
    if spec.termination_grace_period_seconds > limits.max_termination_grace:
        raise _too_much_grace(limits)
    if spec.duration < limits.min_duration:
        raise _too_short(limits)
    return spec


def spec_size(plain: Any) -> int:
    """The bytes of a spec serialized as compact JSON (UTF-8), as :data:`MAX_SPEC_BYTES` counts them."""
    return len(json.dumps(plain, separators=(",", ":"), ensure_ascii=False, default=str).encode())


_GRACE = "spec.terminationGracePeriodSeconds"
_GRACE_CEILING_MESSAGE = f"must be at most {MAX_TERMINATION_GRACE_SECONDS}"


def _too_much_grace(limits: SpecLimits) -> InvalidSpec:
    return InvalidSpec(_GRACE, f"must be at most {limits.max_termination_grace} (the cluster's maximum grace "
                       "period, set by the operator's --max-termination-grace)")


def _too_short(limits: SpecLimits) -> InvalidSpec:
    return InvalidSpec("spec.duration", f"must be at least {format_duration(limits.min_duration)} "
                       "(the cluster's minimum, set by the operator's --min-duration)")


def parse_status(raw: Mapping[str, Any] | None, *, share: bool = True) -> ScavengerJobStatus:
    """Read a raw ``status`` tolerantly: missing or unreadable fields take their defaults. Its conditions are
    the instances already made for equal content (`frozen.shared`); ``share=False``: made anew."""
    data: dict[str, Any] = _plain(raw) if isinstance(raw, Mapping) else {}
    while True:
        try:
            return ScavengerJobStatus.model_validate(data, context=SHARING if share else None)
        except ValidationError as exc:
            pruned = _prune_invalid(data, exc)
            if pruned == data:
                return ScavengerJobStatus()
            data = pruned


def _prune_invalid(data: dict[str, Any], exc: ValidationError) -> dict[str, Any]:
    """Drop the entries named by a status validation error (a bad list item, else the field)."""
    pruned = dict(data)
    bad_items: dict[str, set[int]] = {}
    for error in exc.errors():
        loc = error["loc"]
        if not loc or not isinstance(loc[0], str) or loc[0] not in pruned:
            continue
        field = loc[0]
        if len(loc) > 1 and isinstance(loc[1], int) and isinstance(pruned[field], list):
            bad_items.setdefault(field, set()).add(loc[1])
        else:
            pruned.pop(field)
    for field, indexes in bad_items.items():
        if field in pruned:
            pruned[field] = [item for i, item in enumerate(pruned[field]) if i not in indexes]
    return pruned


_SIMPLE_MESSAGES = {
    "missing": "is required",
    "extra_forbidden": "unknown field",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "bool_type": "must be a boolean",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "string_too_short": "must not be empty",
    "too_short": "must not be empty",
}


def _error_message(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "sj_invalid":
        return str(ctx["reason"])
    if kind in _SIMPLE_MESSAGES:
        return _SIMPLE_MESSAGES[kind]
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}"
    if kind == "greater_than":
        return f"must be greater than {ctx['gt']}"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']} characters"
    if kind == "too_long":
        return f"must have at most {ctx['max_length']} items"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx['expected']}"
    return str(error["msg"])


def _as_invalid_spec(exc: ValidationError) -> InvalidSpec:
    """Turn the first pydantic error into an :class:`InvalidSpec` with a camelCase field path."""
    error = exc.errors()[0]
    ctx = error.get("ctx") or {}
    path = _format_loc(ScavengerJobSpec, error["loc"]) + str(ctx.get("suffix", ""))
    return InvalidSpec(path, _error_message(error))


def _unwrap(annotation: Any) -> Any:
    """Strip ``Annotated`` and ``Optional`` from a type annotation."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            members = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _format_loc(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """Render a pydantic error location as ``spec.volumes[1].mountPath`` / ``spec.nodeSelector[key]``."""
    path = "spec"
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        origin = get_origin(current)
        if isinstance(part, int):
            path += f"[{part}]"
            current = get_args(current)[0] if origin in (tuple, list) and get_args(current) else None
        elif isinstance(current, type) and issubclass(current, BaseModel):
            path += f".{part}"
            field = next(
                (info for name, info in current.model_fields.items() if (info.alias or name) == part), None
            )
            current = field.annotation if field else None
        elif origin is dict:
            path += f"[{part}]"
            current = get_args(current)[1]
        elif part != "[key]":
            path += f".{part}"
            current = None
    return path
