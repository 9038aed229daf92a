"""The getting-started page is run by the kind stage (hack/run-docs): which blocks run, and that what they
submit is what the operator accepts."""
from __future__ import annotations

import re
import tomllib
from types import ModuleType

import pytest
import yaml

from sj_operator.api import parse_spec
from tests.unit.chart import REPO
from tests.unit.scripts import load_script

PAGE = REPO / "docs/getting-started/your-cluster.md"


@pytest.fixture(scope="module")
def run_docs() -> ModuleType:
    return load_script(REPO / "hack/run-docs", "run_docs")


@pytest.mark.parametrize(("markdown", "expected"), [
    ("text\n<!-- run -->\n```sh\necho a\n```\n", ["echo a"]),
    ("<!-- run -->\n\n```bash\necho a\necho b\n```\n```sh\nnot marked\n```\n", ["echo a\necho b"]),
    ("```sh\nnot marked\n```\n", []),
    ("<!-- run -->\n```sh\n```\n<!-- run -->\n```sh\necho c\n```\n", ["", "echo c"]),
])
def test_only_marked_shell_blocks_are_run(run_docs: ModuleType, markdown: str, expected: list[str]) -> None:
    assert run_docs.blocks(markdown) == expected


@pytest.mark.parametrize(("markdown", "error"), [
    ("<!-- run -->\n```yaml\nkind: x\n```\n", "line 1: <!-- run --> is not followed by a ```sh block"),
    ("<!-- run -->\ntext\n```sh\necho\n```\n", "line 1: <!-- run --> is not followed by a ```sh block"),
    ("<!-- run -->\n", "line 1: <!-- run --> is not followed by a ```sh block"),
    ("<!-- run -->\n```sh\necho\n", "line 2: the ```sh block is not closed"),
])
def test_a_marker_that_runs_nothing_is_an_error(run_docs: ModuleType, markdown: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        run_docs.blocks(markdown)


def test_the_script_applies_the_replacements_to_the_blocks_only(run_docs: ModuleType) -> None:
    markdown = "busybox in prose\n<!-- run -->\n```sh\nkubectl run x --image busybox:1.37\n```\n"
    text = run_docs.script(markdown, {"busybox:1.37": "local/sh:dev"})
    assert text.startswith("set -euo pipefail\n")
    assert "kubectl run x --image local/sh:dev" in text
    assert "busybox" not in text


def test_the_page_installs_the_release_and_submits_a_first_sj(run_docs: ModuleType) -> None:
    """What the kind stage relies on the page to do, in this order."""
    steps = "\n".join(run_docs.blocks(PAGE.read_text()))
    order = ["sha256sum --check", "kind load image-archive", "helm install scavenger \"scavenger-$VERSION.tgz\"",
             "pip install --quiet \"scavenger-$VERSION-py3-none-any.whl\"", "kubectl apply -f -",
             "kubectl wait sj/first-sj", "kubectl sj describe first-sj"]
    positions = [steps.find(step) for step in order]
    assert -1 not in positions, [step for step, at in zip(order, positions, strict=True) if at == -1]
    assert positions == sorted(positions)


def test_the_page_names_the_version_being_released() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert re.findall(r"^VERSION=(\S+)$", PAGE.read_text(), re.MULTILINE) == [version]


def test_the_pages_first_sj_is_valid(run_docs: ModuleType) -> None:
    steps = "\n".join(run_docs.blocks(PAGE.read_text()))
    manifest = re.search(r"<<'EOF'\n(.*?)\nEOF\n", steps, re.DOTALL)
    assert manifest is not None
    sj = yaml.safe_load(manifest.group(1))
    assert (sj["kind"], sj["metadata"]["name"]) == ("ScavengerJob", "first-sj")
    spec = parse_spec(sj["spec"])
    assert spec.image == "busybox:1.37"


def test_the_readmes_first_sj_is_valid() -> None:
    manifest = re.search(r"<<'EOF'\n(.*?)\nEOF\n", (REPO / "README.md").read_text(), re.DOTALL)
    assert manifest is not None
    sj = yaml.safe_load(manifest.group(1))
    assert sj["kind"] == "ScavengerJob"
    parse_spec(sj["spec"])
