"""The commands the README and the docs show do what they say: the image-pinning recipe pins what it lists, and
every command that needs no cluster, registry, engine or job run exits 0."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pwdeploy import identifiers as ids
from pwdeploy.cli import cli
from tests.conftest import JAX_VERSION, REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = {path.name: path.read_text(encoding="utf-8") for path in sorted((REPO / "docs").glob("*.md"))}
SHOWN = "\n".join([README, *DOCS.values()])


def test_the_image_pinning_recipe_lists_and_pins_the_same_images(runner: CliRunner, tmp_path: Path) -> None:
    """docs/manifests.md's Images section: the `gcloud ... tags list` lines list the repositories that the render flags
    then pin, for one JAX version, and that render puts the server image in the RM and the workers and the proxy
    image in the proxy."""
    shown = re.findall(r"```bash\n(.*?)```", DOCS["manifests.md"], re.DOTALL)
    (block,) = [b for b in shown if "--proxy-server-image" in b]
    lines = block.replace("\\\n", " ").splitlines()
    listed = [shlex.split(line) for line in lines if line.startswith("gcloud artifacts docker tags list")]
    (render,) = [shlex.split(line)[1:] for line in lines if line.startswith("pwdeploy render")]
    assert render[:3] == ["render", "-f", "job.yaml"]
    flags = dict(zip(render[3::2], render[4::2], strict=True))
    server, proxy = flags.pop("--server-image"), flags.pop("--proxy-server-image")
    assert flags == {}
    jax = server.rsplit("jax_", 1)[1]
    assert sorted(words[5] for words in listed) == sorted(image.split(":")[0] for image in (server, proxy))
    assert [words[6] for words in listed] == [f"--filter=tag~jax_{jax}"] * 2 and proxy.endswith(f"jax_{jax}")
    job = tmp_path / "job.yaml"
    job.write_text(
        yaml.safe_dump(
            {
                "name": "pinned",
                "pathways_version": jax,
                "tpu": {"type": "v5p-16"},
                "main": {"image": "r.example/train:1", "command": "python3 train.py"},
                "storage": {"scratch": "gs://bucket/scratch"},
            }
        )
    )
    mismatch = ["--allow-version-mismatch"] if jax != JAX_VERSION else []  # the docs may name a newer release
    result = runner.invoke(cli, ["render", "-f", str(job), *render[3:], *mismatch])
    assert result.exit_code == 0, result.output
    (jobset,) = yaml.safe_load_all(result.stdout)
    images: dict[str, set[str]] = {}
    for replicated_job in jobset["spec"]["replicatedJobs"]:
        pod = replicated_job["template"]["spec"]["template"]["spec"]
        for container in pod.get("initContainers", []) + pod["containers"]:
            images.setdefault(container["name"], set()).add(container["image"])
    assert images[ids.PROXY_CONTAINER] == {proxy}
    assert images[ids.RM_CONTAINER] == images[ids.WORKER_CONTAINER] == {server}


def offline_commands() -> list[list[str]]:
    """The `pwdeploy` lines of the README and the docs that need no cluster, registry, engine or job run: render,
    validate, schema, local env and the Dockerfile printers, as argument lists (comments and redirections left out)."""
    blocks = re.findall(r"```bash\n(.*?)```", SHOWN, re.DOTALL)
    text = "\n".join(blocks).replace("\\\n", " ")
    offline = ("render", "validate", "schema", "local env", "image dockerfile", "sidecar dockerfile")
    found = []
    for line in text.splitlines():
        words = shlex.split(line.split(" #", 1)[0].split(">", 1)[0])
        if words[:1] == ["pwdeploy"] and " ".join(words[1:3]).startswith(offline) and "job.yaml" not in words:
            found.append(words[1:])
    return found


def test_the_offline_commands_shown_run(
    runner: CliRunner, jax_version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = offline_commands()
    assert len(commands) >= 6, commands
    monkeypatch.chdir(REPO)
    for words in commands:
        words = [str(tmp_path / w) if w in ("demo.yaml", "out/") else w for w in words]
        if words[0] == "render" and "--name" in words:  # the tour writes it to demo.yaml, then validates that
            result = runner.invoke(cli, words)
            (tmp_path / "demo.yaml").write_text(result.stdout, encoding="utf-8")
        else:
            result = runner.invoke(cli, words)
        assert result.exit_code == 0, (words, result.output)
