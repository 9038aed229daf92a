"""The base of the API's models: immutable, and each instance's record of its given fields shared.

pydantic keeps, on every model instance, the set of the fields it was given (``__pydantic_fields_set__``):
an ordinary ``set``, 216 bytes for up to four names and 728 from five, which is more than most of these
models' own values. The loop keeps a parsed status and spec for every SJ (a status of a waiting SJ is three
models: itself and its two conditions), so at 10,000 SJs these sets alone were about 25 MB, nearly all of
them equal. A frozen model never changes that record (``model_copy`` with changes copies it first, and the
copy is shared again here), so instances given the same fields can point at one set.
``benchmarks/bench_loop.py --memory`` measures what the loop keeps per SJ.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict

__all__ = ["SHARED_FIELD_SETS", "FrozenModel"]

SHARED_FIELD_SETS = 4096
"""At most this many distinct sets of given fields are shared; instances given another set keep their own
(the models have a few dozen optional fields, so a client writing odd statuses could otherwise make the
table grow without bound)."""
_shared: dict[frozenset[str], set[str]] = {}


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
