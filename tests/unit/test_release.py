"""What a release ships with its chart: the Kubernetes it needs (one constant), values.schema.json that
describes every value, the README made from them, the notes `helm install` prints, and the image tag."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from sj_operator.api import parse_spec
from sj_operator.api.bounds import MAX_TERMINATION_GRACE_SECONDS
from sj_operator.api.fields import DURATION_PATTERN, QUANTITY_PATTERN
from sj_operator.api.quota import MAX_WEIGHT
from sj_operator.chartdoc import comments, described, rows
from sj_operator.settings import MIN_KUBERNETES_VERSION
from tests.unit.chart import CHART, KUBE_VERSION, REPO, helm, of_kind, render
from tests.unit.scripts import load_script

VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())


@pytest.fixture(scope="module")
def readme() -> ModuleType:
    return load_script(REPO / "hack/chart-readme", "chart_readme")


def test_the_charts_kube_version_is_the_operators_minimum() -> None:
    assert CHART_META["kubeVersion"] == f">={MIN_KUBERNETES_VERSION}.0-0"


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    return SCHEMA["definitions"][ref.removeprefix("#/definitions/")] if ref else node  # type: ignore[no-any-return]


def _uncovered(values: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> list[str]:
    """Keys of values.yaml that the schema does not describe, and schema properties values.yaml lacks."""
    properties = schema.get("properties", {})
    problems = [f"{prefix}{key}: not in the schema" for key in values if key not in properties]
    problems += [f"{prefix}{key}: not in values.yaml" for key in properties if key not in values]
    for key, value in values.items():
        child = _resolve(properties.get(key, {}))
        if isinstance(value, dict) and "properties" in child:
            problems += _uncovered(value, child, f"{prefix}{key}.")
    return problems


def test_the_schema_describes_every_value_and_no_other() -> None:
    assert _uncovered(VALUES, SCHEMA) == []


def _nodes(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for key, child in node.get("properties", {}).items():
        found += _nodes(_resolve(child), f"{path}.{key}")
    return found


def test_every_value_has_a_type_and_fixed_groups_refuse_unknown_keys() -> None:
    for path, node in _nodes(SCHEMA):
        assert {"type", "enum", "oneOf", "allOf"} & node.keys(), path
        if "properties" in node and path != ".resources":  # resources: a container's, which Kubernetes checks
            assert node.get("additionalProperties") is False, f"{path}: a misspelt key must fail"


def test_the_schemas_bounds_are_the_codes() -> None:
    definitions = SCHEMA["definitions"]
    assert definitions["duration"]["pattern"] == DURATION_PATTERN
    assert definitions["quantity"]["oneOf"][0]["pattern"] == QUANTITY_PATTERN
    properties = SCHEMA["properties"]
    assert properties["maxTerminationGrace"]["maximum"] == MAX_TERMINATION_GRACE_SECONDS
    assert properties["defaultNamespaceWeight"]["maximum"] == MAX_WEIGHT
    for name in ("startTimeout", "thrashBackoff", "maxThrashBackoff", "maxProtection", "minDuration"):
        assert properties[name]["$ref"] == "#/definitions/duration", name


def _lint(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), "lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION, *args],
                          capture_output=True, text=True, check=False, timeout=60)


def test_helm_accepts_the_default_and_the_local_values() -> None:
    assert _lint().returncode == 0
    local = _lint("-f", str(REPO / "hack/local-install/values.yaml"),
                  "--set-string", "extraEnv[0].name=KUBERNETES_SERVICE_HOST,extraEnv[0].value=10.0.0.1")
    assert local.returncode == 0, local.stdout


@pytest.mark.parametrize(("setting", "where"), [
    ("replicas=-1", "/replicas"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("threshold=1.5", "/threshold"),
    ("startTimeout=soon", "/startTimeout"),
    ("maxTerminationGrace=3601", "/maxTerminationGrace"),
    ("webhook.port=0", "/webhook/port"),
    ("webhook.enabeld=false", "/webhook"),
    ("pools[0].name=default,pools[0].threshold=1,pools[0].nodeSelector.pool=burst", "/pools/0/name"),
    ("defaultNamespaceQuota.cpu=lots", "/defaultNamespaceQuota/cpu"),
    ("namespaces={Team_A}", "/namespaces/0"),
])
def test_helm_refuses_values_the_schema_forbids(setting: str, where: str) -> None:
    result = _lint("--set", setting)
    assert result.returncode != 0
    assert f"at '{where}'" in result.stdout + result.stderr


def _keys(values: dict[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in values.items():
        keys.add(f"{prefix}{key}")
        if isinstance(value, dict):
            keys |= _keys(value, f"{prefix}{key}.")
    return keys


def test_the_readme_generator_reads_every_key_of_values_yaml() -> None:
    """Every key down to the documented ones, each at its place (keys inside a flow mapping are its value's)."""
    found = set(comments((CHART / "values.yaml").read_text()))
    documented = {path for path, _ in rows(SCHEMA)}
    groups = {path.rpartition(".")[0] for path in documented} - {""}
    assert documented | groups <= found <= _keys(VALUES)


def test_every_documented_value_has_its_comment_and_the_schema_its_description() -> None:
    described_here = comments((CHART / "values.yaml").read_text())
    documented = list(rows(SCHEMA))
    assert len(documented) > 20
    assert [path for path, _ in documented if not described_here[path]] == []
    assert [path for path, node in documented if node.get("description") != described_here[path]] == []


def test_the_comment_parser_keeps_blocks_to_their_key() -> None:
    text = "# header\n\n# a's\na: 1\nb:\n  # b.c's\n  # two lines\n  c: {x: 1}\n  d: []\n#  - commented: out\n"
    assert comments(text) == {"a": "a's", "b": "", "b.c": "b.c's two lines", "b.d": ""}


def test_descriptions_come_first_follow_the_comments_and_go_with_them() -> None:
    schema = {"definitions": {"d": {"type": "string"}}, "properties": {
        "a": {"$ref": "#/definitions/d", "description": "old"},
        "g": {"type": "object", "additionalProperties": False, "properties": {"x": {"type": "integer"}}},
        "m": {"type": "object", "properties": {"y": {"type": "string"}}, "description": "gone"}}}
    text = "# a's\na: s\n# the group\ng:\n  # x's\n  x: 1\nm: {}\n"
    properties = described(schema, text)["properties"]
    assert list(properties["a"].items()) == [("description", "a's"), ("$ref", "#/definitions/d")]
    assert properties["g"]["description"] == "the group"
    assert properties["g"]["properties"]["x"]["description"] == "x's"
    assert "description" not in properties["m"] and "description" not in properties["m"]["properties"]["y"]


def test_the_chart_readme_and_the_schemas_descriptions_are_made_from_the_chart(readme: ModuleType) -> None:
    """Drift: run hack/chart-readme after changing values.yaml, values.schema.json or Chart.yaml."""
    assert (CHART / "values.schema.json").read_text() == readme.schema()
    assert (CHART / "README.md").read_text() == readme.render()


def test_the_readme_shows_types_bounds_and_defaults(readme: ModuleType) -> None:
    text = readme.render()
    assert "| `image.pullPolicy` | `Always` \\| `IfNotPresent` \\| `Never` | `IfNotPresent` |" in text
    assert f"| `maxTerminationGrace` | integer, 0 to {MAX_TERMINATION_GRACE_SECONDS} | `300` |" in text
    assert f"Needs Kubernetes {MIN_KUBERNETES_VERSION} or newer" in text


def _image(objects: list[dict[str, Any]]) -> str:
    [deployment] = of_kind(objects, "Deployment")
    return str(deployment["spec"]["template"]["spec"]["containers"][0]["image"])


def test_the_image_tag_defaults_to_the_charts_app_version() -> None:
    assert VALUES["image"]["tag"] == ""
    assert _image(render()) == f"scavenger/operator:{CHART_META['appVersion']}"
    assert _image(render(values=REPO / "hack/local-install/values.yaml")) == "scavenger/operator:dev"
    assert _image(render("image.tag=1.2.3")) == "scavenger/operator:1.2.3"


def _notes(tmp_path: Path, *sets: str) -> str:
    """NOTES.txt as `helm install` prints it (rendered through a copy of the chart: `helm template` leaves the
    notes out, and `helm install --dry-run` needs a cluster)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates/zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        f'data: {{notes: {{{{ include "{CHART_META["name"]}/templates/NOTES.txt" . | quote }}}}}}\n')
    args = [helm(), "template", "scavenger", str(chart), "--kube-version", KUBE_VERSION,
            "--show-only", "templates/zz-notes.yaml"]
    for item in sets:
        args += ["--set", item]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=60).stdout
    return str(yaml.safe_load(out)["data"]["notes"])


def test_the_notes_say_what_to_do_next(tmp_path: Path) -> None:
    notes = _notes(tmp_path)
    assert "kubectl -n scavenger-system rollout status deployment/scavenger-operator" in notes
    assert f"scavenger/operator:{CHART_META['appVersion']}" in notes, "where the image comes from"
    for command in ("list", "why first-sj", "describe first-sj"):
        assert f"kubectl sj {command} -n default" in notes
    match = re.search(r"<<'EOF'\n(.*?)\n\s*EOF\n", notes, re.DOTALL)
    assert match is not None
    sj = yaml.safe_load(textwrap.dedent(match[1]))
    assert sj["kind"] == "ScavengerJob" and sj["metadata"]["name"] == "first-sj"
    parse_spec(sj["spec"])  # the first SJ is one the operator accepts
    assert f"pip install scavenger-{CHART_META['appVersion']}-py3-none-any.whl" in notes, "the plugin, from the wheel"


def test_the_notes_follow_the_values(tmp_path: Path) -> None:
    notes = _notes(tmp_path, "namespace=ops", "namespaces={team-a,team-b}", "image.tag=dev", "metrics.service=false")
    assert "kubectl -n ops rollout status" in notes
    assert "kubectl -n team-a apply" in notes and "handles SJs in team-a, team-b only" in notes
    assert "port-forward" not in notes and "load\n" not in notes
