"""The README reads as one document: its in-page links land on headings, and each fact is told in one place."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_in_page_links_land_on_headings() -> None:
    headings = {anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", README, re.MULTILINE)}
    links = re.findall(r"\]\(#([^)]+)\)", README)
    assert links, "the README links between its sections"
    assert [link for link in links if link not in headings] == []


def test_pinning_the_pathways_images_is_told_once() -> None:
    assert README.count("--proxy-server-image us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:") == 1
    assert README.count("gcloud artifacts docker tags list us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server") == 1


def offline_commands() -> list[list[str]]:
    """The README's `pwdeploy` lines that need no cluster, registry, engine or job run: render, validate, schema,
    local env and the Dockerfile printers, as argument lists (comments and redirections left out)."""
    blocks = re.findall(r"```bash\n(.*?)```", README, re.DOTALL)
    text = "\n".join(blocks).replace("\\\n", " ")
    offline = ("render", "validate", "schema", "local env", "image dockerfile", "sidecar dockerfile")
    found = []
    for line in text.splitlines():
        words = shlex.split(line.split(" #", 1)[0].split(">", 1)[0])
        if words[:1] == ["pwdeploy"] and " ".join(words[1:3]).startswith(offline) and "job.yaml" not in words:
            found.append(words[1:])
    return found


def test_the_readmes_offline_commands_run(
    runner: CliRunner, jax_version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = offline_commands()
    assert len(commands) >= 6, commands
    monkeypatch.chdir(REPO)
    for words in commands:
        words = [str(tmp_path / w) if w in ("demo.yaml", "out/") else w for w in words]
        if words[0] == "render" and "--name" in words:  # the README writes it to demo.yaml, then validates that
            result = runner.invoke(cli, words)
            (tmp_path / "demo.yaml").write_text(result.stdout, encoding="utf-8")
        else:
            result = runner.invoke(cli, words)
        assert result.exit_code == 0, (words, result.output)
