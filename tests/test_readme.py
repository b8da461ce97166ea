"""The README stays true: its config reference covers every field, and CI runs its test command."""

from __future__ import annotations

import re

from pwdeploy.fields import FIELDS
from pwdeploy.schema import config_reference_markdown
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_config_reference_is_the_generated_one() -> None:
    table = config_reference_markdown()
    assert table in README, "README's config table is stale: paste `pwdeploy schema --markdown` into it"
    assert all(f"| `{field.path}` |" in table for field in FIELDS)


def test_ci_runs_the_readme_test_command() -> None:
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    assert "bash scripts/test.sh" in blocks[1]
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "pwdeploy local run -f examples/data_parallel/job.yaml" in blocks[0]
