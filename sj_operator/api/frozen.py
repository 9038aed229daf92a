"""The base of the API's models: immutable, each instance's record of its given fields shared, and small
models parsed from equal content shared whole.

pydantic keeps, on every model instance, the set of the fields it was given (``__pydantic_fields_set__``):
an ordinary ``set``, 216 bytes for up to four names and 728 from five, which is more than most of these
models' own values. The loop keeps a parsed status and spec for every SJ (a status of a waiting SJ is three
models: itself and its two conditions), so at 10,000 SJs these sets alone were about 25 MB, nearly all of
them equal. A frozen model never changes that record (``model_copy`` with changes copies it first, and the
copy is shared again here), so instances given the same fields can point at one set.

The small models nested in a spec or status (its resources, conditions, tolerations, env vars, volumes,
fallbacks...) repeat across SJs that differ elsewhere: SJs that differ in their ``args`` ask the same resources,
and thousands of waiting SJs carry one ``Admitted=False`` condition, word for word. Parsed with `SHARING` (as
``parse_spec`` and ``parse_status`` do), a field marked `BY_CONTENT` gives the instance already made from equal
content (`shared`), strings and all: nothing mutates a frozen model, and nothing takes the identity of a
nested model for its SJ's (equality and hashing are by value, as before). The whole spec or status of SJs
alike is shared by the loop itself (``memo.Recent``). ``benchmarks/bench_loop.py --memory [--distinct]``
measures what the loop keeps per SJ.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from types import MappingProxyType
from typing import Any, Final, Self, TypeVar

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, ValidationInfo
from pydantic_core import CoreSchema, core_schema

__all__ = ["BY_CONTENT", "SHARED_FIELD_SETS", "SHARED_MODELS", "SHARED_MOST_SIZE", "SHARING", "FrozenModel", "shared"]

SHARED_FIELD_SETS = 4096
"""At most this many distinct sets of given fields are shared; instances given another set keep their own
(the models have a few dozen optional fields, so a client writing odd statuses could otherwise make the
table grow without bound)."""
_shared: dict[frozenset[str], set[str]] = {}

SHARED_MODELS = 1024
"""At most this many nested models are kept to be shared by content (`shared`), and at most this many contents
seen once are remembered (by their hash alone): content is kept from the second time it is parsed, so content
that never comes again (a condition with its SJ's own time) costs the table next to nothing. When the table is
full, the model found or made longest ago is dropped for the new one (it stays with the models that hold it, and
content equal to it parses into a new instance); when the contents seen once are, they are forgotten. Content that
keeps coming back (the resources of a template, the reason thousands of SJs wait for) stays while fewer than this
many other contents are kept between two of its parses; whatever a tenant writes, the table only drops content
sooner, it never grows."""
_models: OrderedDict[tuple[Hashable, ...], Any] = OrderedDict()
_once: set[int] = set()
SHARED_MOST_SIZE = 4096
"""Content larger than this (the characters of its strings, and 8 for every other value) is not shared: what the
table keeps stays small, whatever a tenant writes (the operator's own conditions are a few hundred)."""

SHARING: Final[Mapping[str, bool]] = MappingProxyType({"share_by_content": True})
"""The validation context (``model_validate(raw, context=SHARING)``) under which `BY_CONTENT` fields are shared;
without it every parse makes its own instances."""

M = TypeVar("M")


def _share(model: BaseModel) -> None:
    given = model.__pydantic_fields_set__
    key = frozenset(given)
    shared = _shared.get(key)
    if shared is None:
        if len(_shared) >= SHARED_FIELD_SETS:
            return
        shared = _shared[key] = set(key)
    object.__setattr__(model, "__pydantic_fields_set__", shared)


class FrozenModel(BaseModel):
    """An immutable model whose record of given fields is shared with every other instance given the same
    fields (``model_fields_set`` reads as before)."""

    model_config = ConfigDict(frozen=True)

    def model_post_init(self, context: Any, /) -> None:
        _share(self)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copied = super().model_copy(update=update, deep=deep)
        _share(copied)
        return copied


class _NotJSON(Exception):
    """The raw value is not plain JSON content, or is larger than `SHARED_MOST_SIZE`."""


def _flat(value: dict[Any, Any] | list[Any], budget: int, head: Hashable = dict) -> tuple[tuple[Hashable, ...], int]:
    """A ``dict`` or ``list`` of plain JSON values (``dict`` with ``str`` keys, ``list``, ``str``, ``int``,
    ``float``, ``bool``, None; exactly these types, no subclass) as one flat tuple, equal only for equal content:
    ``head`` and then each key (in sorted order) and its value, or ``list`` and then its items; ``1``, ``1.0`` and
    ``True`` told apart (Python's ``==`` takes them for one). With what is left of ``budget`` once the characters
    of each key and string, and 8 for every other value, are taken from it. Raises `_NotJSON` for anything else (a
    tuple, a ``datetime``, a ``str`` subclass...) or once the budget is spent."""
    flat: list[Hashable]
    if type(value) is dict:
        flat = [head]
        for key in sorted(value):
            if type(key) is not str:
                raise _NotJSON
            item = value[key]
            if type(item) is str:  # the most common value, without a call
                budget -= len(key) + len(item)
            else:
                item, budget = _item(item, budget - len(key))
            flat += (key, item)
    else:
        flat = [list]
        for item in value:
            item, budget = _item(item, budget)
            flat.append(item)
    if budget < 0:
        raise _NotJSON
    return tuple(flat), budget


def _item(item: object, budget: int) -> tuple[Hashable, int]:
    kind = type(item)
    if kind is str:
        return item, budget - len(item)  # type: ignore[arg-type]
    if kind is int or item is None:  # told apart from strings and tuples by their types
        return item, budget - 8
    if kind is dict or kind is list:
        return _flat(item, budget - 8)  # type: ignore[arg-type]
    if kind is float or kind is bool:
        return (kind, item), budget - 8
    raise _NotJSON


def shared(cls: type[Any], raw: object, info: ValidationInfo, make: Callable[[Any], M]) -> M:
    """``make(raw)``: ``raw`` validated as ``cls``. When validating with `SHARING`, and ``raw`` is a ``dict`` of
    plain JSON content (`_flat`) of at most `SHARED_MOST_SIZE`: the instance ``make`` gave for equal content, kept
    from the second time such content came (`SHARED_MODELS`). Validation of these models depends on their input
    alone, so an input that validated once gives what it gave then; one that raises is never kept."""
    if info.context is not SHARING or type(raw) is not dict:
        return make(raw)
    try:
        key = _flat(raw, SHARED_MOST_SIZE, cls)[0]  # type: ignore[arg-type]
    except (_NotJSON, TypeError, RecursionError):  # TypeError: keys that do not sort
        return make(raw)
    models = _models
    model = models.get(key)
    if model is not None:
        models.move_to_end(key)  # the last one dropped
        return model  # type: ignore[no-any-return]
    model = make(raw)
    once, seen = _once, hash(key)
    if seen not in once:
        if len(once) >= SHARED_MODELS:
            once.clear()
        once.add(seen)
        return model
    once.discard(seen)
    if len(models) >= SHARED_MODELS:
        models.popitem(last=False)
    models[key] = model
    return model


class _ByContent:
    """``Annotated[Model, BY_CONTENT]``: a nested model shared by content (`shared`)."""

    def __get_pydantic_core_schema__(self, source: type[Any], handler: GetCoreSchemaHandler) -> CoreSchema:
        def validate(raw: object, inner: core_schema.ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
            return shared(source, raw, info, inner)

        return core_schema.with_info_wrap_validator_function(validate, handler(source))

    def __repr__(self) -> str:
        return "BY_CONTENT"


BY_CONTENT: Final = _ByContent()
"""Marks a nested model's field (``tuple[Annotated[Condition, BY_CONTENT], ...]``) as shared by content."""
