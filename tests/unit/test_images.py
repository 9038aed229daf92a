"""hack/images: the Dockerfiles are the one recipe; the registry-free builder follows them or refuses."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.unit.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def images() -> ModuleType:
    return load_script(REPO / "hack/images", "hack_images")


def test_every_dockerfile_is_one_the_builder_follows(images: ModuleType) -> None:
    recipes = {name: images.parse(path, images.CONTEXTS.get(name)) for name, path in images.IMAGES.items()}
    assert recipes["operator"].entrypoint == ["python3", "-m", "sj_operator"]
    assert recipes["operator"].user == "10001:10001"
    assert recipes["generic-counter"].entrypoint == ["python3", "/app/counter.py"]
    assert recipes["generic-counter"].env["SJ_CHECKPOINT_DIR"] == "/checkpoints"
    assert recipes["mpi-heat"].user == "1000:1000" and recipes["mpi-heat"].workdir == "/home/mpiuser"
    for recipe in recipes.values():
        assert all(path.is_file() for path in images.copied_files(recipe)), recipe.path


def test_the_counter_runs_from_what_its_image_copies(images: ModuleType, tmp_path: Path) -> None:
    """The counter's context is the repository's root, as the operator's: its image holds the package's
    checkpoint helper beside the counter, which runs from those files alone (no site-packages)."""
    recipe = images.parse(images.IMAGES["generic-counter"], images.CONTEXTS["generic-counter"])
    assert recipe.context == REPO
    root = tmp_path / "root"
    for word, args in recipe.steps:
        if word == "COPY":
            images.Chroot(root, tmp_path / "build.log").copy(recipe, args, recipe.workdir)
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == [
        "app/counter.py", "app/sj_operator/__init__.py", "app/sj_operator/checkpoint.py"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SJ_", "COUNTER_", "PYTHON"))}
    run = subprocess.run([sys.executable, "-S", str(root / recipe.entrypoint[1].lstrip("/")), "--target", "3",
                          "--step-seconds", "0", "--checkpoint-dir", str(tmp_path / "ckpt")],
                         capture_output=True, text=True, cwd=tmp_path, env=env, check=False)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["value"] == 3
    assert (tmp_path / "ckpt/ckpt-000000000003.json").is_file()


def test_the_deploy_manifest_runs_what_the_operator_image_holds(images: ModuleType) -> None:
    """The Deployment's user and the image's agree, and the image's entrypoint is the package's."""
    recipe = images.parse(images.IMAGES["operator"])
    deployment = (REPO / "deploy/chart/templates/deployment.yaml").read_text()
    values = yaml.safe_load((REPO / "deploy/chart/values.yaml").read_text())
    uid = recipe.user.split(":")[0]
    assert f"runAsUser: {uid}" in deployment
    local = yaml.safe_load((REPO / "hack/local-install/values.yaml").read_text())
    assert f"{values['image']['repository']}:{local['image']['tag']}" == "scavenger/operator:dev", "make images' tag"


@pytest.mark.parametrize(
    ("dockerfile", "message"),
    [
        ("FROM python:3.11-slim\n", "builds on debian:bookworm-slim only"),
        ("FROM debian:bookworm-slim AS build\n", "builds on debian:bookworm-slim only"),
        ("FROM debian:bookworm-slim\nADD x.tar /\n", "ADD is not supported"),
        ("FROM debian:bookworm-slim\nARG VERSION\n", "ARG is not supported"),
        ("FROM debian:bookworm-slim\nHEALTHCHECK CMD true\n", "HEALTHCHECK is not supported"),
    ],
)
def test_what_the_builder_cannot_follow_is_refused(images: ModuleType, tmp_path: Path, dockerfile: str,
                                                     message: str) -> None:
    path = tmp_path / "Dockerfile"
    path.write_text(dockerfile)
    with pytest.raises(ValueError, match=message):
        images.parse(path)


@pytest.mark.parametrize(
    ("dockerfile", "message"),
    [
        ("# a comment\n\nFROM debian:bookworm-slim\nRUN true\nADD x.tar /\n", ":5: ADD is not supported"),
        ("FROM debian:bookworm-slim\nRUN a \\\n && b\nEXPOSE 80\n", ":4: EXPOSE is not supported"),
        ("FROM debian:bookworm-slim\nCOPY --chown=1000 app.py /app/\n", ":2: COPY --chown=1000: options of COPY"),
        ("FROM debian:bookworm-slim\nCOPY --from=build /out /out\n", ":2: COPY --from=build: options of COPY"),
        ("FROM debian:bookworm-slim\nRUN --mount=type=cache,target=/c true\n", ":2: RUN --mount=type=cache"),
        ("FROM debian:bookworm-slim\nRUN <<EOF\napt-get update\nEOF\n", ":2: RUN <<EOF: here-documents"),
        ('FROM debian:bookworm-slim\nRUN ["make", \n', ":2: RUN "),
        ("FROM debian:bookworm-slim\nRUN true\nFROM debian:bookworm-slim\n", ":3: a second FROM (a multi-stage build)"),
        ("RUN true\nFROM debian:bookworm-slim\n", ":1: RUN before FROM"),
        ("FROM debian:bookworm-slim\nCOPY missing.py /app/\n", ":2: COPY missing.py /app/: "),
        ("FROM debian:bookworm-slim\nCOPY ../outside /app/\n", "is outside the build context"),
        ("FROM debian:bookworm-slim\nCOPY *.rs /app/\n", ":2: COPY *.rs /app/: nothing in"),
        ("FROM debian:bookworm-slim\nCOPY app.py\n", ":2: COPY app.py: a source and a target are needed"),
        ('FROM debian:bookworm-slim\nCMD ["python3", 1]\n', ":2: CMD "),
        ("# only a comment\n", "no FROM debian:bookworm-slim"),
    ],
)
def test_a_refusal_names_the_file_the_line_and_the_instruction(images: ModuleType, tmp_path: Path, dockerfile: str,
                                                                message: str) -> None:
    (tmp_path / "ctx").mkdir()
    (tmp_path / "outside").write_text("not in the context\n")
    (tmp_path / "ctx/app.py").write_text("print(1)\n")
    path = tmp_path / "ctx/Dockerfile"
    path.write_text(dockerfile)
    with pytest.raises(ValueError) as refused:
        images.parse(path)
    assert str(refused.value).startswith(str(path)) and message in str(refused.value)


def test_what_a_dockerfile_of_ones_own_may_use_is_followed_as_docker_does(images: ModuleType, tmp_path: Path) -> None:
    """The shell forms of ENTRYPOINT and CMD, the older ``ENV KEY value``, relative WORKDIRs, COPY wildcards."""
    for name in ("a.py", "b.py", "notes.txt"):
        (tmp_path / name).write_text(name)
    (tmp_path / "Dockerfile").write_text(
        "FROM docker.io/library/debian:bookworm-slim\nENV GREETING hello there\nWORKDIR /app\nWORKDIR src\n"
        "COPY *.py ./\nUSER 1000\nENTRYPOINT exec python3 a.py\nCMD [\"--fast\"]\n")
    recipe = images.parse(tmp_path / "Dockerfile")
    assert recipe.env == {"GREETING": "hello there"}
    assert recipe.workdir == "/app/src" and recipe.user == "1000"
    assert recipe.entrypoint == ["/bin/sh", "-c", "exec python3 a.py"] and recipe.cmd == ["--fast"]
    assert [word for word, _ in recipe.steps] == ["ENV", "WORKDIR", "WORKDIR", "COPY", "USER"], "in order, for RUN"
    assert [p.name for p in images.copied_files(recipe)] == ["a.py", "b.py"]


def test_run_steps_as_a_user_get_that_users_home(images: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n"
                                         "mpiuser:x:1000:1000::/home/mpiuser:/bin/bash\n")
    root = images.Chroot(tmp_path, tmp_path / "build.log")
    assert [root.home(u) for u in ("", "root", "0:0", "mpiuser", "1000:1000", "4242")] == \
        ["/root", "/root", "/root", "/home/mpiuser", "/home/mpiuser", "/"]


def _dockerfile(tmp_path: Path, text: str = "FROM debian:bookworm-slim\nCOPY app.py /app/\n") -> Path:
    (tmp_path / "app.py").write_text("print(1)\n")
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("argv", "message"), [
    (["--dockerfile", "{path}"], "--dockerfile needs --tag REPOSITORY:TAG"),
    (["operator", "--dockerfile", "{path}", "--tag", "me/app:1"], "give no NAME with it"),
    (["--dockerfile", "{dir}/nothing-here", "--tag", "me/app:1"], "nothing-here is not a file"),
    (["--dockerfile", "{path}", "--tag", "me/app"], "--tag: 'me/app' is not REPOSITORY:TAG"),
    (["--dockerfile", "{bad}", "--tag", "me/app:1"], "Dockerfile.bad:2: ADD is not supported by hack/images"),
    (["operator", "generic-counter", "--tag", "me/app:1"], "--tag and --output name one image"),
    (["kind-node", "--kind", "kind"], "kind-node is for Docker"),
])
def test_command_line_refusals(images: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               argv: list[str], message: str) -> None:
    path = _dockerfile(tmp_path)
    bad = tmp_path / "Dockerfile.bad"
    bad.write_text("FROM debian:bookworm-slim\nADD app.py /app/\n")
    with pytest.raises(SystemExit) as exited:
        images.arguments([a.format(path=path, dir=tmp_path, bad=bad) for a in argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_dockerfile_of_ones_own_is_built_under_its_tag_and_delivered_where_asked(
        images: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--dockerfile: built once as the image --tag names (no copy to rename it), imported into the real node's
    containerd, loaded into a kind cluster, and written to --output."""
    path = _dockerfile(tmp_path)
    args = images.arguments(["--dockerfile", str(path), "--tag", "me/app:1", "--containerd", "/run/c.sock",
                             "--kind", "dev", "--output", str(tmp_path / "out/app.tar")])
    assert args.reference == "docker.io/me/app:1" and args.recipe.path == path.resolve() and args.names == []
    built: list[tuple[str, str]] = []
    archive = tmp_path / "cache.oci.tar"

    def build_recipe(name: str, recipe: object, reference: str, force: bool) -> Path:
        built.append((name, reference))
        images.write_archive(reference, [_layer(tmp_path / "l.tar", "app.py", "x\n")], {}, archive)
        return archive

    commands: list[tuple[str, ...]] = []
    monkeypatch.setattr(images, "build_recipe", build_recipe)
    monkeypatch.setattr(images, "run", lambda *argv, **_: commands.append(argv))
    monkeypatch.setattr(images, "BIN", tmp_path / "no-bin")
    monkeypatch.setattr(images.shutil, "which", lambda name: f"/usr/local/bin/{name}")
    assert images.build_all(args) == 0
    assert built == [("dockerfile-docker.io_me_app_1", "docker.io/me/app:1")]
    out = tmp_path / "out/app.tar"
    assert out.read_bytes() == archive.read_bytes(), "the archive already bears the tag: copied as it is"
    assert commands == [
        ("ctr", "--address", "/run/c.sock", "-n", "k8s.io", "images", "import", "--snapshotter", "overlayfs", str(out)),
        ("/usr/local/bin/kind", "load", "image-archive", str(out), "--name", "dev"),
    ]


def test_instructions_join_continuations_and_skip_comments(images: ModuleType) -> None:
    text = "# c\nFROM debian:bookworm-slim\n\nRUN a \\\n # inside\n && b\nENV A=1 \\\n    B=\"two words\"\n"
    assert images.instructions(text) == [("FROM", "debian:bookworm-slim"), ("RUN", "a  && b"),
                                         ("ENV", 'A=1  B="two words"')]
    assert images.parse_env('A=1  B="two words"') == {"A": "1", "B": "two words"}
    assert images.numbered_instructions(text)[1] == (4, "RUN", "a  && b"), "where the instruction starts"


def test_inputs_hash_follows_the_copied_files_only(images: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("print(1)\n")
    (tmp_path / "notes.txt").write_text("not copied\n")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM debian:bookworm-slim\nCOPY app.py /app/app.py\n")
    recipe = images.parse(dockerfile)
    first = images.input_hash(recipe)
    (tmp_path / "notes.txt").write_text("changed\n")
    assert images.input_hash(recipe) == first
    (tmp_path / "app.py").write_text("print(2)\n")
    assert images.input_hash(recipe) != first


def test_archive_is_an_oci_layout_that_names_the_image(images: ModuleType, tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as out:
        payload = tmp_path / "hello"
        payload.write_text("hi\n")
        out.add(payload, arcname="hello")
    archive = tmp_path / "x.oci.tar"
    images.write_archive("docker.io/scavenger/demo:dev", [layer], {"Entrypoint": ["/hello"]}, archive)
    with tarfile.open(archive) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    [manifest_desc] = index["manifests"]
    assert manifest_desc["annotations"]["io.containerd.image.name"] == "docker.io/scavenger/demo:dev"
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1], "content-addressed"
    manifest = json.loads(files[f"blobs/sha256/{manifest_desc['digest'].split(':')[1]}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    assert config["config"]["Entrypoint"] == ["/hello"]
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]


def _layer(path: Path, name: str, text: str) -> Path:
    payload = path.parent / f"{path.stem}-{name}"
    payload.write_text(text)
    with tarfile.open(path, "w") as out:
        out.add(payload, arcname=name)
    return path


def test_archive_with_layers_is_also_a_docker_archive_and_reproducible(images: ModuleType, tmp_path: Path) -> None:
    base, top = _layer(tmp_path / "base.tar", "base", "b\n"), _layer(tmp_path / "top.tar", "top", "t\n")
    first, second = tmp_path / "1.tar", tmp_path / "2.tar"
    images.write_archive("registry.k8s.io/etcd:3.6.5-0", [base, top], {}, first)
    top.touch()  # a later mtime of a layer file changes nothing in the archive
    images.write_archive("registry.k8s.io/etcd:3.6.5-0", [base, top], {}, second)
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]
    [docker] = json.loads(files["manifest.json"])
    assert docker["RepoTags"] == ["registry.k8s.io/etcd:3.6.5-0"]
    digests = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (base, top)]
    assert docker["Layers"] == [f"blobs/sha256/{d}" for d in digests], "bottom layer first"
    config = json.loads(files[docker["Config"]])
    assert config["rootfs"]["diff_ids"] == [f"sha256:{d}" for d in digests]
    [desc] = json.loads(files["index.json"])["manifests"]
    assert desc["annotations"]["org.opencontainers.image.ref.name"] == "3.6.5-0"


@pytest.mark.parametrize(("given", "qualified"), [
    ("scavenger/operator:0.2.0", "docker.io/scavenger/operator:0.2.0"),
    ("busybox:1.36", "docker.io/library/busybox:1.36"),
    ("registry.example/team/op:1", "registry.example/team/op:1"),
    ("localhost:5000/op:v1", "localhost:5000/op:v1"),
])
def test_tags_are_named_as_containerd_names_them(images: ModuleType, given: str, qualified: str) -> None:
    assert images.qualified(given) == qualified


@pytest.mark.parametrize("given", ["operator", "localhost:5000/op", "op:", "op:bad/tag"])
def test_a_tag_without_one_is_refused(images: ModuleType, given: str) -> None:
    with pytest.raises(ValueError, match="is not REPOSITORY:TAG"):
        images.qualified(given)


def test_a_retagged_archive_is_the_same_image_under_the_new_name(images: ModuleType, tmp_path: Path) -> None:
    """`make release` names the operator's image scavenger/operator:VERSION: the archive keeps every blob (the
    same image id and manifest digest) and a valid OCI layout and Docker archive that name only the new tag."""
    base, top = _layer(tmp_path / "base.tar", "base", "b\n"), _layer(tmp_path / "top.tar", "top", "t\n")
    dev = tmp_path / "dev.oci.tar"
    images.write_archive("docker.io/scavenger/operator:dev", [base, top], {"User": "10001:10001"}, dev)
    out = images.retag(dev, "docker.io/scavenger/operator:0.2.0", tmp_path / "dist/op-0.2.0.oci.tar")
    assert out == tmp_path / "dist/op-0.2.0.oci.tar" and not list(out.parent.glob("*.tmp"))

    def files(archive: Path) -> dict[str, bytes]:
        with tarfile.open(archive) as tar:
            return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]

    before, after = files(dev), files(out)
    assert {k: v for k, v in after.items() if k.startswith("blobs/")} == \
        {k: v for k, v in before.items() if k.startswith("blobs/")}
    assert after["oci-layout"] == before["oci-layout"]
    [old_desc], [new_desc] = (json.loads(f["index.json"])["manifests"] for f in (before, after))
    assert new_desc["digest"] == old_desc["digest"] and new_desc["size"] == old_desc["size"]
    assert new_desc["annotations"] == {"io.containerd.image.name": "docker.io/scavenger/operator:0.2.0",
                                       "org.opencontainers.image.ref.name": "0.2.0"}
    [old_docker], [new_docker] = (json.loads(f["manifest.json"]) for f in (before, after))
    assert new_docker == {**old_docker, "RepoTags": ["scavenger/operator:0.2.0"]}
    manifest = json.loads(after[f"blobs/sha256/{new_desc['digest'].removeprefix('sha256:')}"])
    assert [layer["digest"] for layer in manifest["layers"]] == \
        [f"sha256:{name.rpartition('/')[2]}" for name in new_docker["Layers"]]


@pytest.mark.parametrize("go_mod", [
    "module m\n\ngo 1.26\n\nrequire github.com/coredns/coredns v1.12.4\n",
    "module m\n\nrequire (\n\tgithub.com/coredns/coredns v1.12.4\n\tgithub.com/coredns/caddy v1.1.2 // indirect\n)\n",
    "module m\n\nrequire (\n\tgithub.com/coredns/caddy v1.1.2 // indirect\n"
    "\tgithub.com/coredns/coredns v1.12.4 // indirect\n)\n",
])
def test_a_modules_version_is_read_from_a_require_line_or_block(images: ModuleType, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch, go_mod: str) -> None:
    (tmp_path / "hack/tools/coredns").mkdir(parents=True)
    (tmp_path / "hack/tools/coredns/go.mod").write_text(go_mod)
    monkeypatch.setattr(images, "ROOT", tmp_path)
    assert images.module_version("coredns", "github.com/coredns/coredns") == "v1.12.4"
    with pytest.raises(SystemExit, match=r"does not pin github\.com/coredns/other"):
        images.module_version("coredns", "github.com/coredns/other")


def test_the_node_images_coredns_tag_is_the_version_its_module_pins(images: ModuleType) -> None:
    go_mod = (REPO / "hack/tools/coredns/go.mod").read_text()
    assert "require github.com/coredns/coredns " + images.COMPONENT_TAGS["coredns"] in go_mod
