"""The Helm chart's values as documentation: one table, rendered for the chart's README (``hack/chart-readme``)
and for the docs site's reference (``python -m sj_operator.docgen helm-values``), so the two never differ.

Each value's row comes from the places that stay the only ones to edit: the comment above the key in
``values.yaml`` (what it means; ``hack/chart-readme`` copies it into the schema's ``description``, where editors
show it), its default there, and its type and bounds in ``values.schema.json``.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

__all__ = ["CHART", "comments", "described", "rows", "schema_text", "type_of", "values_table"]

CHART = Path(__file__).resolve().parents[1] / "deploy" / "chart"
"""The chart in a checkout of the repository (the only place these pages are made)."""
_KEY = re.compile(r"^( *)([A-Za-z_][\w-]*):")


def comments(values_text: str) -> dict[str, str]:
    """The comment block right above each key of a values file, by dotted path ("" when there is none).
    A blank line ends a block; commented-out lines belong to the block they are in."""
    found: dict[str, str] = {}
    block: list[str] = []
    stack: list[tuple[int, str]] = []
    for line in values_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#").strip())
            continue
        match = _KEY.match(line)
        if match is not None:
            indent = len(match[1])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, match[2]))
            found[".".join(key for _, key in stack)] = " ".join(block)
        block = []
    return found


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """A schema node with a local ``$ref`` (``#/definitions/NAME``) replaced by what it names."""
    ref = node.get("$ref")
    if ref is None:
        return node
    resolved: dict[str, Any] = schema["definitions"][ref.removeprefix("#/definitions/")]
    return resolved


def _is_group(node: dict[str, Any]) -> bool:
    """A fixed group of keys (an object whose properties are all it may hold), documented key by key."""
    return "properties" in node and node.get("additionalProperties") is False


def properties(schema: dict[str, Any], node: dict[str, Any] | None = None, prefix: str = "") -> Iterator[
        tuple[str, dict[str, Any]]]:
    """(dotted path, property node as written, ``$ref`` unresolved) of every key of values.yaml: the groups
    and what they hold."""
    node = schema if node is None else node
    for key, child in node["properties"].items():
        yield f"{prefix}{key}", child
        if _is_group(resolve(schema, child)):
            yield from properties(schema, resolve(schema, child), f"{prefix}{key}.")


def rows(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted path, property node) of every documented value: a group is documented key by key, anything
    else as a whole."""
    for path, node in properties(schema):
        if not _is_group(resolve(schema, node)):
            yield path, node


def described(schema: dict[str, Any], values_text: str) -> dict[str, Any]:
    """The schema with each key's ``description`` set to its comment in values.yaml (a key without one keeps
    none). Beside a ``$ref``, draft 7 ignores every keyword but the annotation is still what editors show."""
    found = comments(values_text)
    for path, node in properties(schema):
        rest = {key: value for key, value in node.items() if key != "description"}
        node.clear()  # in place, the description first: the node is its parent's
        if found.get(path):
            node["description"] = found[path]
        node.update(rest)
    return schema


def schema_text(schema: dict[str, Any]) -> str:
    """values.schema.json as it is committed."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def type_of(schema: dict[str, Any], node: dict[str, Any]) -> str:
    """A short, readable type: the definition's title, an enum's values, a range, a list's or map's items."""
    node = resolve(schema, node)
    if "title" in node:
        return str(node["title"])
    if "enum" in node:
        return " \\| ".join(f"`{value}`" for value in node["enum"])
    if "allOf" in node:
        return type_of(schema, node["allOf"][0])
    kind = node.get("type", "any")
    if kind == "array":
        item = resolve(schema, node.get("items", {}))
        return "list of " + ("objects" if item.get("type") == "object" and "title" not in item
                             else type_of(schema, item) + "s")
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        item = resolve(schema, node["additionalProperties"])
        return "map of " + (type_of(schema, item) if "title" in item else f"{item.get('type', 'any')}s")
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None and high is not None:
        return f"{kind}, {low} to {high}"
    if low is not None:
        return f"{kind}, at least {low}"
    return str(kind)


def lookup(values: dict[str, Any], path: str) -> Any:
    value: Any = values
    for key in path.split("."):
        value = value[key]
    return value


def inline(value: Any) -> str:
    """A default as one line of YAML."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000).strip()
    return text.removesuffix("...").strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def values_table(chart: Path = CHART) -> list[str]:
    """The lines of the values' Markdown table: path, type and bounds, default, meaning."""
    values = yaml.safe_load((chart / "values.yaml").read_text())
    schema = json.loads((chart / "values.schema.json").read_text())
    table = ["| value | type | default | meaning |", "| --- | --- | --- | --- |"]
    for path, node in rows(schema):
        default = f"`{_cell(inline(lookup(values, path)))}`"
        meaning = _cell(node.get("description", ""))
        table.append(f"| `{path}` | {type_of(schema, node)} | {default} | {meaning} |")
    return table
