"""Image inputs without an engine: the target platform, .dockerignore (Docker's rules), the credential warning, the
jax check step of the job Dockerfile (run by the real python3 against a stand-in jax module), the pathwaysutils
pin, and the one image-reference grammar that config, preflight and the image builds share."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pwdeploy.cli import cli
from pwdeploy.config.fields import Kind
from pwdeploy.config.value_kinds import KINDS
from pwdeploy.config.values import parse_image
from pwdeploy.errors import ConfigError, DependencyError
from pwdeploy.imageref import REFERENCE_PATTERN, BadReference, parse_reference
from pwdeploy.images import engine, inputs, sidecar_image
from pwdeploy.images import job_image as spec
from pwdeploy.images.ignore import IgnoreRules
from pwdeploy.job_python import OFFICIAL_PYTHON, official_python
from tests import test_sidecar
from tests.test_image import REPOSITORY, job_at, this_machine, write_job
from tests.test_sidecar import instructions


def _collect(path: Path, pathwaysutils: str | None = "0.1.13") -> inputs.ImageInputs:
    return spec.collect(job_at(path), path, machine=this_machine(pathwaysutils))


def test_both_kinds_target_linux_amd64_and_the_platform_is_hashed(tmp_path: Path) -> None:
    found = _collect(write_job(tmp_path, {"repository": REPOSITORY}))
    assert found.platform == inputs.TARGET_PLATFORM == "linux/amd64"
    (tmp_path / "sc").mkdir()
    sidecar_section = {"repository": "r.example/x", "base_image": test_sidecar.BASE, "source_dir": "src"}
    sidecar_job = test_sidecar.job_at(test_sidecar.write_job(tmp_path / "sc", sidecar_section))
    assert sidecar_image.collect(sidecar_job).platform == "linux/amd64"
    values = {
        "pwdeploy_version": "0.1.0",
        "pip_args": "",
        "pwdeploy_wheel": "w.whl",
        "pathwaysutils_version": "1",
        "workdir": "/app",
    }
    blocks = {"requirements": False, "pwdeploy": False}

    def assemble(platform: str) -> inputs.ImageInputs:
        return inputs.assemble(
            spec.TEMPLATE,
            values,
            blocks,
            (),
            base_image="b:1",
            python_version="3.11",
            jax_version="0.10.2",
            platform=platform,
        )

    assert assemble("linux/amd64").inputs_hash != assemble("linux/arm64").inputs_hash


def test_docker_cli_builds_for_the_platform(tmp_path: Path) -> None:
    """A recording stand-in for the docker binary: the argument list the build passes."""
    recorder = tmp_path / "docker"
    recorder.write_text(
        '#!/bin/sh\necho "$@" > "$(dirname "$0")/args"\n'
        'while [ $# -gt 0 ]; do [ "$1" = --iidfile ] && echo sha256:1 > "$2"; shift; done\ncat > /dev/null\n'
    )
    recorder.chmod(0o755)
    context = tmp_path / "context.tar"
    context.write_bytes(b"")

    class Quiet:
        def step(self, step: engine.BuildStep) -> None: ...

        def line(self, text: str) -> None: ...

    assert engine.DockerCli(str(recorder), env={}).build(context, "r/x:1", Quiet(), "linux/amd64") == "sha256:1"
    args = (tmp_path / "args").read_text().split()
    assert args[:3] == ["build", "--platform", "linux/amd64"] and args[-3:] == ["--tag", "r/x:1", "-"]


@pytest.mark.parametrize(
    ("pattern", "path", "excluded"),
    [
        ("*.pem", "a.pem", True),
        ("*.pem", "sub/a.pem", False),  # Docker: relative to the root, unlike .gitignore
        ("**/*.pem", "sub/deep/a.pem", True),
        ("**/*.pem", "a.pem", True),
        ("/data", "data/big/x.bin", True),  # a folder leaves out all below it
        ("data/", "data/x", True),
        ("d?ta", "data", True),
        ("d?ta", "da/ta", False),
        ("*", "sub/x", True),
        ("sub/*", "sub/deep/x", True),
        ("[a-c].txt", "b.txt", True),
        ("[^a-c].txt", "b.txt", False),
        ("# comment", "# comment", False),
        ("a\\*b", "a*b", True),
        ("a\\*b", "axb", False),
        ("logs/**", "logs/a/b", True),
        ("logs/**", "logs2/a", False),
    ],
)
def test_dockerignore_patterns(pattern: str, path: str, excluded: bool) -> None:
    assert IgnoreRules.parse(pattern).excluded(path) is excluded


def test_exceptions_and_the_last_match_decides() -> None:
    rules = IgnoreRules.parse("# secrets\n\n*.json\n!config.json\nconfig.json.bak\ndata\n!data/keep.txt\n")
    assert [rules.excluded(p) for p in ("a.json", "config.json", "data/x", "data/keep.txt", "b.txt")] == [
        True,
        False,
        True,
        False,
        False,
    ]
    assert IgnoreRules.parse("!a\na").excluded("a"), "a later pattern overrides an earlier exception"


def test_dockerignore_leaves_files_out_of_the_context_and_the_hash(tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY})
    (tmp_path / "data" / "shards").mkdir(parents=True)
    (tmp_path / "data" / "shards" / "0.bin").write_bytes(b"x" * 100)
    (tmp_path / "data" / "README").write_text("kept by an exception")
    (tmp_path / ".env").write_text("TOKEN=1\n")
    (tmp_path / ".dockerignore").write_text(".env\ndata\n!data/README\n")
    found = _collect(path)
    names = [item.name for item in found.files]
    assert names[:4] == ["code/.dockerignore", "code/requirements.txt", "code/train.py", "code/data/README"]
    assert not any(".env" in name or "shards" in name for name in names) and found.warnings == ()
    (tmp_path / "data" / "shards" / "0.bin").write_bytes(b"changed")
    (tmp_path / ".env").write_text("TOKEN=2\n")
    assert _collect(path).inputs_hash == found.inputs_hash, "ignored files do not change the image"


def test_an_excluded_folder_is_skipped_unread_unless_an_exception_could_reach_into_it() -> None:
    assert IgnoreRules.parse("datasets\n").prunes("datasets")
    assert not IgnoreRules.parse("datasets\n!datasets/README\n").prunes("datasets")
    assert not IgnoreRules.parse("*.bin\n").prunes("datasets")


def test_files_that_look_like_credentials_are_named_in_a_warning(tmp_path: Path, runner: CliRunner) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY})
    (tmp_path / "keys").mkdir()
    for name in (".env", "sa-key.json", "keys/tls.pem", "credentials-prod.json", "id_rsa.pub", ".netrc", "notes.md"):
        (tmp_path / name).write_text("x")
    (warning,) = _collect(path).warnings
    listed = ".env, .netrc, credentials-prod.json, id_rsa.pub, sa-key.json, keys/tls.pem"
    assert warning.startswith(f"image.source_dir {tmp_path}: {listed} look like credentials and would be copied")
    assert "notes.md" not in warning
    assert f"list them in {tmp_path / '.dockerignore'}" in warning
    printed = runner.invoke(cli, ["image", "dockerfile", "-f", str(path)])
    assert printed.exit_code == 0 and printed.stderr == f"warning: {warning}\n" and printed.stdout.startswith("#")
    (tmp_path / ".dockerignore").write_text(".env\n.netrc\n*.json\nid_rsa*\nkeys\n")
    assert _collect(path).warnings == ()


def _jax_check(dockerfile: str) -> list[str]:
    (check,) = [arg for word, arg in instructions(dockerfile) if word == "RUN" and "import sys, jax" in arg]
    return shlex.split(check)


def test_the_build_step_checks_the_installed_jax_with_the_real_python(tmp_path: Path) -> None:
    (tmp_path / "job").mkdir()
    argv = _jax_check(_collect(write_job(tmp_path / "job", {"repository": REPOSITORY})).dockerfile)
    assert argv[:2] == ["python", "-c"] and argv[-1] == "0.10.2"
    for version, code in (("0.10.2", 0), ("0.9.0", 1)):
        module = tmp_path / version / "jax"
        module.mkdir(parents=True)
        (module / "__init__.py").write_text(f"__version__ = {version!r}\n")
        env = {"PYTHONPATH": str(module.parent)}
        done = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, text=True, check=False)
        assert (done.returncode, done.stdout) == (code, f"jax {version}\n"), done.stderr
    assert done.stderr.strip() == "jax 0.9.0 is installed, but pathways_version is 0.10.2"


def test_pathwaysutils_is_pinned_to_the_installed_version(tmp_path: Path, runner: CliRunner) -> None:
    assert spec.installed_pathwaysutils() == importlib.metadata.version("pathwaysutils")
    path = write_job(tmp_path, {"repository": REPOSITORY})
    first = _collect(path, "0.1.13")
    assert '"jax==0.10.2" "pathwaysutils==0.1.13"' in instructions(first.dockerfile)[1][1]
    assert _collect(path, "0.1.14").inputs_hash != first.inputs_hash
    with pytest.raises(DependencyError) as caught:
        _collect(path, None)
    assert caught.value.exit_code == 9 and "pip install pathwaysutils" in str(caught.value.hint)
    result = runner.invoke(cli, ["image", "dockerfile", "-f", str(path)])
    assert f"pathwaysutils=={importlib.metadata.version('pathwaysutils')}" in result.stdout


REFERENCES = [
    ("python:3.11-slim", True),
    ("us-docker.pkg.dev/p/r/app:1.0", True),
    ("localhost:5000/a/b@sha256:" + "a" * 64, True),
    ("[::1]:5000/x:v", True),
    ("localhost/x", True),
    ("team/app", True),
    ("my-host.io/a.b/c__d/e-f:T_1", True),
    ("host_name.io/x:1", False),  # names a host ("." in it), and "_" cannot be in one
    ("x:ünicode", False),  # tags are ASCII
    ("Team/app:1", False),
    ("reg.io//app", False),
    ("reg.io/a..b", False),
    ("app:-x", False),
    ("reg.io/app@sha256:xyz", False),
]


@pytest.mark.parametrize(("text", "valid"), REFERENCES)
def test_config_preflight_images_and_the_schema_agree_on_references(text: str, valid: bool) -> None:
    def accepts(check: object, *args: object) -> bool:
        try:
            check(*args)  # type: ignore[operator]
        except (ConfigError, BadReference):
            return False
        return True

    schema = KINDS[Kind.IMAGE].schema  # the JSON Schema pattern of image fields
    pattern = schema(None)["pattern"]  # type: ignore[arg-type]
    repository = re.sub(r"(:[^/]*|@.*)$", "", text)
    assert accepts(parse_image, text, "main.image") is valid
    assert accepts(parse_reference, text) is valid
    assert (re.fullmatch(pattern, text) is not None) is valid
    assert (re.fullmatch(REFERENCE_PATTERN, text) is not None) is valid
    if valid:
        assert accepts(inputs.check_repository, repository, "image.repository", "job image")
    assert accepts(inputs.check_repository, "host_name.io/x", "image.repository", "job image") is False


# ---------------------------------------------------------------------------------------------- links


def test_a_file_link_out_of_the_job_folder_is_refused_naming_link_and_target(tmp_path: Path, runner: CliRunner) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "id_ed25519").write_text("PRIVATE KEY")
    path = write_job(tmp_path, {"repository": REPOSITORY})
    (tmp_path / "notes").symlink_to(outside / "id_ed25519")
    with pytest.raises(ConfigError) as raised:
        _collect(path)
    said = str(raised.value)
    assert said.startswith(f"image.source_dir: {tmp_path / 'notes'} is a symbolic link to {outside / 'id_ed25519'}")
    assert f"outside {tmp_path}" in said and ".dockerignore" in said
    printed = runner.invoke(cli, ["image", "dockerfile", "-f", str(path)])
    assert printed.exit_code == 2 and "is a symbolic link to" in printed.stderr and "PRIVATE" not in printed.output
    (tmp_path / ".dockerignore").write_text("notes\n")
    assert "code/notes" not in [item.name for item in _collect(path).files]


def test_a_link_inside_the_folder_is_copied_as_the_file_it_names(tmp_path: Path) -> None:
    path = write_job(tmp_path, {"repository": REPOSITORY})
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "config.json").write_text("{}")
    (tmp_path / "config.json").symlink_to("sub/config.json")
    (tmp_path / "escape").symlink_to("sub/../../" + tmp_path.name + "/train.py")  # back inside: kept
    names = {item.name: item for item in _collect(path).files}
    assert names["code/config.json"].read() == b"{}" and "code/escape" in names


def test_a_link_out_of_the_sidecar_source_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "ok.py").write_text("x = 1\n")
    (tmp_path / "secret.txt").write_text("outside the source folder")
    (tmp_path / "src" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    job = test_sidecar.job_at(test_sidecar.write_job(tmp_path, {"repository": "r.example/x", "source_dir": "src"}))
    with pytest.raises(ConfigError, match=r"sidecar.source_dir: .*/src/leak.txt is a symbolic link to .*secret.txt"):
        sidecar_image.collect(job, machine=this_machine())


@pytest.mark.parametrize("size", [0, 5, (1 << 20) + 7])
def test_a_context_file_is_hashed_as_hashlib_hashes_it(tmp_path: Path, size: int) -> None:
    """A file source (a requirements file) is hashed through CPython's sha256 when small, hashlib's when big."""
    import hashlib
    import os

    path = tmp_path / "requirements.txt"
    data = os.urandom(size)
    path.write_bytes(data)
    line = inputs._line(inputs.ContextFile("requirements.txt", path))
    assert line == f"requirements.txt\0-\0{hashlib.sha256(data).hexdigest()}\0".encode()


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "docker.io/",
                "library/",
                "python:",
                "python",
                ":",
                "3",
                "12",
                ".",
                "-slim",
                "_x",
                "rc1",
                "é",
                "٣",
                "/",
                "x",
            ]
        ),
        max_size=8,
    ).map("".join)
)
@example("python:3.12-slim-bookworm")
@example("docker.io/library/python:3.11")
@example("python:3.12rc1")
@example("python:rc1.12")
@example("python:٣.12")
@example("python:3.12_x")
@example("python:3.12é")
@example("python:3.")
@example("python:.12")
@example("library/docker.io/python:3.1")
def test_the_official_python_of_a_base_is_what_the_pattern_reads(image: str) -> None:
    match = re.fullmatch(OFFICIAL_PYTHON, image)
    assert official_python(image) == (match[1] if match else None)
