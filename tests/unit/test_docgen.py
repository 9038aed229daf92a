"""The generated reference pages (`sj_operator.docgen`) are committed as they are generated, and the tables they
are generated from cover what the code does."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

from sj_operator import docgen
from sj_operator.faults import REASONS
from sj_operator.policy.conditions import WAIT_REASON_MEANINGS, WAIT_REASONS
from sj_operator.policy.lifecycle import LaunchRefusal, NamespaceRefusal
from sj_operator.policy.outcomes import EVENT_REASONS

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", sorted(docgen.PAGES))
def test_committed_page_matches_the_code(page: str) -> None:
    path, render = docgen.PAGES[page]
    assert (REPO / path).read_text() == render(), (
        f"{path} is stale: run `make reference` (`python -m sj_operator.docgen --write`)")


def test_every_wait_reason_is_explained() -> None:
    assert list(WAIT_REASON_MEANINGS) == list(WAIT_REASONS)


def _emitted_reasons() -> set[str]:
    """The string constants among the arguments of every call that records an Event or a transition."""
    found: set[str] = set()
    for source in (REPO / "sj_operator").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name not in {"transition", "event", "_event", "Event"}:
                continue
            for arg in node.args:
                for const in ast.walk(arg):
                    if isinstance(const, ast.Constant) and isinstance(const.value, str) \
                            and const.value.isidentifier() and const.value[:1].isupper():
                        found.add(const.value)
    return found - {"Normal", "Warning", "Job"}


@pytest.mark.source_text
def test_every_event_reason_the_code_records_is_documented() -> None:
    documented = set(EVENT_REASONS) | set(REASONS.values())
    emitted = _emitted_reasons() | set(get_args(LaunchRefusal)) | set(get_args(NamespaceRefusal))
    assert emitted - documented == set(), "add these Event reasons to policy.outcomes.EVENT_REASONS"
    assert set(EVENT_REASONS) - emitted == set(), "EVENT_REASONS names reasons nothing records"


def test_every_flag_is_in_the_reference() -> None:
    page = docgen.render_flags()
    for flag, env, _, _ in docgen._SETTINGS:
        assert f"`{flag}` | `{env}`" in page
    assert "(default" not in page.split("| --- |", 1)[1]
