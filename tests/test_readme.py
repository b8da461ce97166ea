"""The README stays true: its config reference covers every field, and CI runs its test command."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from pwdeploy.config import load_job
from pwdeploy.config.json_schema import config_reference_markdown, job_schema
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_config_reference_is_the_generated_one() -> None:
    table = config_reference_markdown()
    assert table in README, "README's config table is stale: paste `pwdeploy schema --markdown` into it"


def schema_fields(properties: dict[str, Any], prefix: str = "") -> list[str]:
    """The config paths the JSON Schema accepts: sections (objects with properties) open into their fields."""
    paths = []
    for key, sub in properties.items():
        inner = sub.get("properties") if sub.get("type") == "object" else None
        paths += schema_fields(inner, f"{prefix}{key}.") if inner else [f"{prefix}{key}"]
    return paths


def test_config_reference_lists_every_field_the_config_accepts_once() -> None:
    listed = re.findall(r"^\| `([a-z_.]+)` \|", README, flags=re.M)
    accepted = schema_fields(job_schema()["properties"])
    assert sorted(listed) == sorted(accepted)


def test_readme_example_config_loads(tmp_path: Path) -> None:
    example = re.findall(r"```yaml\n(.*?)```", README, flags=re.S)[0]
    (tmp_path / "job.yaml").write_text(example, encoding="utf-8")
    job = load_job(tmp_path / "job.yaml", {}, installed_jax=lambda: "0.10.2")
    assert job.name == yaml.safe_load(example)["name"]


def test_ci_runs_the_readme_test_command() -> None:
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    test_command = blocks[1].strip()
    assert test_command == "bash scripts/test.sh"
    ci_commands = [
        line.removeprefix("exec ") for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    ]
    assert test_command in ci_commands, "CI must run the README's test command as written"
    assert "pwdeploy local run -f examples/data_parallel/job.yaml" in blocks[0]
