"""The CustomResourceDefinitions (ScavengerJob, ScavengerQuota, ScavengerClusterQuota), generated from the
pydantic models.

The pydantic JSON schema is rewritten into a *structural* OpenAPI v3 schema as the API server
requires: ``$ref`` inlined, ``Optional`` flattened (omitting a field is how the API says "none"),
``additionalProperties: false`` dropped (the API server prunes unknown fields), free-form maps marked
``x-kubernetes-preserve-unknown-fields``, and only scalar defaults kept.

``python -m sj_operator.api.crd [quota|clusterquota]`` prints the YAML committed under ``crds/`` (and the
chart's ``crds/``); ``make crd`` writes them all.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from sj_operator.api.bounds import MAX_NAME_LENGTH
from sj_operator.api.quota import ScavengerClusterQuotaSpec, ScavengerQuotaSpec
from sj_operator.api.spec import ScavengerJobSpec
from sj_operator.api.status import ScavengerJobStatus
from sj_operator.names import (
    CLUSTER_QUOTA_CRD_NAME,
    CLUSTER_QUOTA_KIND,
    CLUSTER_QUOTA_PLURAL,
    CLUSTER_QUOTA_SHORT_NAME,
    CRD_NAME,
    GROUP,
    KIND,
    LIST_KIND,
    PLURAL,
    QUOTA_CRD_NAME,
    QUOTA_KIND,
    QUOTA_PLURAL,
    QUOTA_SHORT_NAME,
    SHORT_NAME,
    SINGULAR,
    VERSION,
)

CRD_FILE_NAME = f"{CRD_NAME}.yaml"
QUOTA_CRD_FILE_NAME = f"{QUOTA_CRD_NAME}.yaml"
CLUSTER_QUOTA_CRD_FILE_NAME = f"{CLUSTER_QUOTA_CRD_NAME}.yaml"

_SCALAR_TYPES = frozenset({"string", "integer", "number", "boolean"})
_COPIED_KEYWORDS = ("enum", "format", "pattern", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems",
                    "minProperties", "maxProperties")


class SchemaConversionError(ValueError):
    """A model uses a construct that has no structural OpenAPI v3 equivalent."""


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline ``$ref`` (and single-member ``allOf``), keeping the referring node's own keywords."""
    while True:
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            rest = {key: value for key, value in node.items() if key != "$ref"}
            node = {**defs[name], **rest}
        elif "allOf" in node and len(node["allOf"]) == 1:
            rest = {key: value for key, value in node.items() if key != "allOf"}
            node = {**node["allOf"][0], **rest}
        else:
            return node


def _convert(node: dict[str, Any], defs: dict[str, Any], *, with_defaults: bool) -> dict[str, Any]:
    """Rewrite one pydantic JSON schema node into a structural OpenAPI v3 node."""
    node = _resolve(node, defs)
    if node.get("x-kubernetes-int-or-string"):
        return _int_or_string(node)
    if "anyOf" in node:
        members = [member for member in node["anyOf"] if member != {"type": "null"}]
        if len(members) != 1:
            raise SchemaConversionError(f"unsupported union in schema: {node['anyOf']!r}")
        rest = {key: value for key, value in node.items() if key != "anyOf"}
        return _convert({**_resolve(members[0], defs), **rest}, defs, with_defaults=with_defaults)
    out: dict[str, Any] = {"description": node["description"]} if "description" in node else {}
    out.update(_typed(node, defs, with_defaults=with_defaults))
    out.update(_keywords(node))
    return out


def _int_or_string(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"description": node["description"]} if "description" in node else {}
    out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    for keyword in ("pattern", "maxLength"):
        if keyword in node:
            out[keyword] = node[keyword]
    out["x-kubernetes-int-or-string"] = True
    return out


def _typed(node: dict[str, Any], defs: dict[str, Any], *, with_defaults: bool) -> dict[str, Any]:
    """The type of a node and what hangs below it (properties, items), or its default for a scalar."""
    kind = node.get("type")
    if kind == "object":
        return _object(node, defs, with_defaults=with_defaults)
    if kind == "array":
        return {"type": "array", "items": _convert(node["items"], defs, with_defaults=with_defaults)}
    if kind in _SCALAR_TYPES:
        out: dict[str, Any] = {"type": kind}
        if with_defaults and node.get("default") is not None:
            out["default"] = node["default"]
        return out
    raise SchemaConversionError(f"schema node without a supported type: {node!r}")


def _object(node: dict[str, Any], defs: dict[str, Any], *, with_defaults: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object"}
    properties = node.get("properties")
    extra = node.get("additionalProperties")
    if properties:
        out["properties"] = {name: _convert(child, defs, with_defaults=with_defaults)
                             for name, child in properties.items()}
        if node.get("required"):
            out["required"] = list(node["required"])
    elif isinstance(extra, dict):
        out["additionalProperties"] = _convert(extra, defs, with_defaults=with_defaults)
    elif extra is not False:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _keywords(node: dict[str, Any]) -> dict[str, Any]:
    """Validation keywords copied as they are; exclusive bounds in OpenAPI v3.0 form; x-kubernetes-*."""
    out = {keyword: node[keyword] for keyword in _COPIED_KEYWORDS if keyword in node}
    if "exclusiveMinimum" in node:
        out["minimum"] = node["exclusiveMinimum"]
        out["exclusiveMinimum"] = True
    if "exclusiveMaximum" in node:
        out["maximum"] = node["exclusiveMaximum"]
        out["exclusiveMaximum"] = True
    out.update({key: value for key, value in node.items() if key.startswith("x-kubernetes-")})
    key_rule = _key_length_rule(node)
    if key_rule is not None:
        out["x-kubernetes-validations"] = [*out.get("x-kubernetes-validations", ()), key_rule]
    return out


def _key_length_rule(node: dict[str, Any]) -> dict[str, str] | None:
    """A map's bound on its keys' length (``propertyNames``, which a structural schema cannot carry) as a
    CEL rule."""
    names = node.get("propertyNames")
    if names is None:
        return None
    if set(names) != {"maxLength"}:
        raise SchemaConversionError(f"unsupported propertyNames: {names!r}")
    most = names["maxLength"]
    return {"rule": f"self.all(k, k.size() <= {most})", "message": f"keys must be at most {most} characters"}


def model_schema(model: type[BaseModel], *, with_defaults: bool) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of a model, by its camelCase aliases."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.pop("$defs", {})
    return _convert(schema, defs, with_defaults=with_defaults)


def open_api_schema() -> dict[str, Any]:
    """The ``openAPIV3Schema`` of the ScavengerJob resource."""
    return {
        "type": "object",
        "description": "A checkpointing workload run on idle-but-reserved capacity, below every other workload.",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            # Spec defaults are applied by the API server too, so stored objects show them.
            "spec": model_schema(ScavengerJobSpec, with_defaults=True),
            "status": model_schema(ScavengerJobStatus, with_defaults=False),
        },
        "required": ["spec"],
        "x-kubernetes-validations": [{
            "rule": f"self.metadata.name.size() <= {MAX_NAME_LENGTH}",
            "message": f"metadata.name must be at most {MAX_NAME_LENGTH} characters (a DNS label, so that the "
                       "names of its runs, pods and Services derive from it)",
        }],
    }


def _crd(name: str, names: dict[str, Any], version: dict[str, Any], scope: str = "Namespaced") -> dict[str, Any]:
    """A CustomResourceDefinition (apiextensions.k8s.io/v1) of this group, served and stored at ``VERSION``."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {"group": GROUP, "names": names, "scope": scope,
                 "versions": [{"name": VERSION, "served": True, "storage": True, **version}]},
    }


def build_crd() -> dict[str, Any]:
    """The ScavengerJob CustomResourceDefinition as a dict."""
    return _crd(CRD_NAME, {
        "kind": KIND,
        "listKind": LIST_KIND,
        "plural": PLURAL,
        "singular": SINGULAR,
        "shortNames": [SHORT_NAME],
        "categories": ["all", "scavenger"],
    }, {
        "subresources": {"status": {}},
        "additionalPrinterColumns": [
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Interruptions", "type": "integer", "jsonPath": ".status.interruptedCount"},
            {"name": "Priority", "type": "integer", "jsonPath": ".status.runningPriority"},
            {"name": "Admitted", "type": "string", "description": "Launched, or why the SJ waits",
             "jsonPath": '.status.conditions[?(@.type=="Admitted")].reason'},
            {"name": "Job", "type": "string", "jsonPath": ".status.jobName", "priority": 1},
            {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        "schema": {"openAPIV3Schema": open_api_schema()},
    })


def _quota_crd(name: str, kind: str, plural: str, short_name: str, spec: type[BaseModel], description: str, *,
               scope: str = "Namespaced", columns: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    """A quota's CRD: no status, its weight, cap (and ``columns``) printed."""
    return _crd(name, {
        "kind": kind, "listKind": f"{kind}List", "plural": plural,
        "singular": kind.lower(), "shortNames": [short_name], "categories": ["scavenger"],
    }, {
        "additionalPrinterColumns": [
            {"name": "Weight", "type": "integer", "jsonPath": ".spec.weight"},
            {"name": "Hard", "type": "string", "jsonPath": ".spec.hard"},
            *columns,
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        "schema": {"openAPIV3Schema": {
            "type": "object",
            "description": description,
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": model_schema(spec, with_defaults=True),
            },
            "required": ["spec"],
        }},
    }, scope=scope)


def build_quota_crd() -> dict[str, Any]:
    """The ScavengerQuota CustomResourceDefinition: one namespace's cap and fair-share weight."""
    return _quota_crd(QUOTA_CRD_NAME, QUOTA_KIND, QUOTA_PLURAL, QUOTA_SHORT_NAME, ScavengerQuotaSpec,
                      "What one namespace's ScavengerJobs may request at once, and its weight in "
                      "the fair share of the scavenged room between namespaces.")


def build_cluster_quota_crd() -> dict[str, Any]:
    """The ScavengerClusterQuota CustomResourceDefinition (cluster-scoped): the cap and fair-share weight of
    every namespace its selector selects."""
    return _quota_crd(CLUSTER_QUOTA_CRD_NAME, CLUSTER_QUOTA_KIND, CLUSTER_QUOTA_PLURAL, CLUSTER_QUOTA_SHORT_NAME,
                      ScavengerClusterQuotaSpec,
                      "What each namespace the selector selects may have its ScavengerJobs request at once, "
                      "and its weight in the fair share of the scavenged room between namespaces. The "
                      "administrator's: a namespace's own ScavengerQuota can only tighten it.", scope="Cluster",
                      columns=({"name": "Selector", "type": "string", "jsonPath": ".spec.namespaceSelector",
                                "priority": 1},))


@dataclass(frozen=True)
class GeneratedCRD:
    """One committed CRD: its file name, how it is built and what it is generated from."""

    file_name: str
    build: Callable[[], dict[str, Any]]
    source: str


CRDS: dict[str, GeneratedCRD] = {
    "job": GeneratedCRD(CRD_FILE_NAME, build_crd, "sj_operator/api/spec.py and status.py"),
    "quota": GeneratedCRD(QUOTA_CRD_FILE_NAME, build_quota_crd, "sj_operator/api/quota.py"),
    "clusterquota": GeneratedCRD(CLUSTER_QUOTA_CRD_FILE_NAME, build_cluster_quota_crd, "sj_operator/api/quota.py"),
}
"""Every CRD ``python -m sj_operator.api.crd [WHICH]`` prints, by WHICH (the ScavengerJob's without one)."""


def render_crd_yaml(which: str = "job") -> str:
    """A CRD (a key of ``CRDS``) as the YAML document committed under ``crds/`` (and the chart's ``crds/``)."""
    crd = CRDS[which]
    body = yaml.safe_dump(crd.build(), sort_keys=False, allow_unicode=True, width=120)
    command = "python -m sj_operator.api.crd" + ("" if which == "job" else f" {which}")
    return f"# Generated by `{command}` from {crd.source}. Do not edit.\n" + body


def main() -> None:
    """Print a CRD's YAML: the ScavengerJob's, or the one named by the argument (``quota``, ``clusterquota``)."""
    args = sys.argv[1:]
    if len(args) > 1 or (args and args[0] not in CRDS):
        sys.exit(f"usage: python -m sj_operator.api.crd [{'|'.join(k for k in CRDS if k != 'job')}]")
    print(render_crd_yaml(args[0] if args else "job"), end="")


if __name__ == "__main__":
    main()
