"""examples/: each manifest is one the operator accepts, its image one hack/images builds, and the LAMMPS
wrapper chooses between a fresh start and LAMMPS's own restart file as docs/examples/lammps.md says."""
from __future__ import annotations

import ast
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from sj_operator.api import parse_spec
from tests.unit.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent for p in (REPO / "examples").glob("*/Dockerfile"))
WRAPPER = REPO / "examples/lammps/lammps-run"


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_an_example_is_an_image_the_builder_follows_and_an_sj_the_operator_accepts(example: Path) -> None:
    images = load_script(REPO / "hack/images", "hack_images")
    recipe = images.parse(example / "Dockerfile")
    assert all(path.is_file() for path in images.copied_files(recipe))
    docs = [d for d in yaml.safe_load_all((example / "scavengerjob.yaml").read_text()) if d]
    sjs = [d for d in docs if d["kind"] == "ScavengerJob"]
    assert sjs
    for sj in sjs:
        parse_spec(sj["spec"])
        claims = {v["persistentVolumeClaim"]["claimName"] for v in sj["spec"].get("volumes", [])
                  if "persistentVolumeClaim" in v}
        assert claims <= {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}, \
            "the manifest brings the claims it mounts"


def test_the_examples_shell_scripts_are_linted() -> None:
    makefile = (REPO / "Makefile").read_text()
    for script in (REPO / "examples").glob("*/*"):
        if script.is_file() and script.read_text(errors="replace").startswith("#!/bin/sh"):
            assert str(script.relative_to(REPO)) in makefile, f"{script} is not in the Makefile's SHELL_SCRIPTS"


def _wrapper(tmp_path: Path, **env: str) -> list[str]:
    """What lammps-run execs: a fake mpirun on PATH prints its arguments, one a line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "mpirun").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (bin_dir / "mpirun").chmod(0o755)
    out = subprocess.run([str(WRAPPER), "--hostfile", "/etc/mpi/hostfile"], capture_output=True, text=True,
                         check=True, env={"PATH": f"{bin_dir}:{os.environ['PATH']}", **env})
    return out.stdout.splitlines()


def _var(argv: list[str], name: str) -> str | None:
    pairs = [(argv[i + 1], argv[i + 2]) for i, word in enumerate(argv) if word == "-var"]
    return dict(pairs).get(name)


def test_without_a_restart_file_the_deck_starts_afresh(tmp_path: Path) -> None:
    argv = _wrapper(tmp_path, SJ_CHECKPOINT_DIR=str(tmp_path))
    assert argv[0] == "lammps-run: no restart file in " + str(tmp_path) + ": starting afresh"
    mpirun = argv[1:]
    assert mpirun[:3] == ["--hostfile", "/etc/mpi/hostfile", "lmp"], "mpirun's options first, then LAMMPS"
    assert _var(mpirun, "start") == "fresh" and _var(mpirun, "restart") is None
    assert (_var(mpirun, "dir"), _var(mpirun, "steps"), _var(mpirun, "every")) == (str(tmp_path), "6000", "500")


def test_a_restart_file_is_resumed_from_and_a_torn_one_thrown_away(tmp_path: Path) -> None:
    (tmp_path / "melt.restart").write_bytes(b"whole")
    (tmp_path / "melt.restart.tmp").write_bytes(b"torn by SIGTERM")
    argv = _wrapper(tmp_path, SJ_CHECKPOINT_DIR=str(tmp_path), MELT_STEPS="800", MELT_EVERY="100")
    assert argv[0] == f"lammps-run: resuming from {tmp_path}/melt.restart"
    assert _var(argv, "start") == "resume" and _var(argv, "restart") == f"{tmp_path}/melt.restart"
    assert (_var(argv, "steps"), _var(argv, "every")) == ("800", "100")
    assert not (tmp_path / "melt.restart.tmp").exists()


def test_the_page_shows_the_wrapper_as_it_is() -> None:
    """docs/examples/lammps.md explains lammps-run line by line: its block is the script less its comments."""
    page = (REPO / "docs/examples/lammps.md").read_text()
    block = page.split("## The wrapper, line by line", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    script = [line for line in WRAPPER.read_text().splitlines() if not line.startswith("# ")]
    assert block.splitlines() == [line for line in script if line.strip()]


def test_the_e2e_test_holds_the_tolerance_the_page_states() -> None:
    e2e = ast.parse((REPO / "tests/e2e/test_real_node.py").read_text())
    [held] = [ast.literal_eval(node.value) for node in e2e.body if isinstance(node, ast.Assign)
              and [getattr(t, "id", "") for t in node.targets] == ["LAMMPS_TOLERANCE"]]
    page = (REPO / "docs/examples/lammps.md").read_text().split("## The tolerance", 1)[1]
    stated = {}
    table = next(block for block in page.split("\n\n") if block.startswith("|"))
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        key = cells[0].split("`")[1]
        stated[key] = float(cells[1].rstrip("%")) / 100 if cells[1].endswith("%") else float(cells[1])
    assert stated == held
