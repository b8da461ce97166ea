"""The docs stay true: the tables the code defines are the generated ones, the config reference covers every
field once, the README is a front page whose links land, the site builds with --strict, and CI runs the README's
test command."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from pwdeploy.cli import reference
from pwdeploy.cluster.diagnose.causes import CAUSES, MEANINGS, READS, STAGES
from pwdeploy.config import load_job
from pwdeploy.config.json_schema import job_schema
from pwdeploy.readiness import checks, version
from tests.conftest import REPO
from tests.kube_objects import small_job

DOCS = REPO / "docs"
README = (REPO / "README.md").read_text(encoding="utf-8")
PAGES = sorted(DOCS.glob("*.md"))


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("path", [p for p in PAGES if reference.blocks(p.read_text(encoding="utf-8"))], ids=str)
def test_generated_tables_are_what_the_code_defines(path: Path, update_goldens: bool) -> None:
    text = path.read_text(encoding="utf-8")
    fresh = reference.refresh(text)
    if update_goldens:
        path.write_text(fresh, encoding="utf-8")
    assert text == fresh, f"{path.name} is stale: pytest --update-goldens {__file__} rewrites its tables"


def test_every_generated_table_is_in_the_docs_once() -> None:
    placed = [name for path in PAGES for name in reference.blocks(path.read_text(encoding="utf-8"))]
    assert sorted(placed) == sorted(reference.TABLES)


def table_of(name: str) -> str:
    (text,) = [p.read_text(encoding="utf-8") for p in PAGES if name in reference.blocks(p.read_text(encoding="utf-8"))]
    return text.split(f"<!-- generated: {name} -->\n", 1)[1].split("<!-- end generated", 1)[0]


def schema_fields(properties: dict[str, Any], prefix: str = "") -> list[str]:
    """The config paths the JSON Schema accepts: sections (objects with properties) open into their fields."""
    paths = []
    for key, sub in properties.items():
        inner = sub.get("properties") if sub.get("type") == "object" else None
        paths += schema_fields(inner, f"{prefix}{key}.") if inner else [f"{prefix}{key}"]
    return paths


def test_config_reference_lists_every_field_the_config_accepts_once() -> None:
    listed = re.findall(r"^\| `([a-z_.]+)` \|", table_of("config-fields"), flags=re.M)
    assert sorted(listed) == sorted(schema_fields(job_schema()["properties"]))


def test_every_diagnose_cause_has_a_meaning_and_every_stage_its_sources() -> None:
    assert sorted(MEANINGS) == sorted(CAUSES)
    assert sorted(READS) == sorted(STAGES)
    listed = re.findall(r"^\| [a-z]+ \| `([a-z-]+)` \|", table_of("diagnose-causes"), flags=re.M)
    assert listed == list(CAUSES)


def test_the_readiness_table_names_every_check_in_report_order() -> None:
    queued = small_job(
        {
            "tpu.capacity": "queued",
            "scheduling.queue": "tpu",
            "main.secret_env": {"T": "s/k"},
            "mtc.enabled": True,
            "sidecar.image": "us-docker.pkg.dev/p/r/sidecar:1",
        }
    )
    sliced = small_job(
        {
            "tpu.type": "tpu7x-128",
            "tpu.dynamic_slicing": True,
            "tpu.capacity": "reservation",
            "tpu.reservation": "all-capacity",
            "scheduling.queue": "tpu",
        }
    )
    declared = [version.NAME, *dict.fromkeys(check.name for check in checks(queued, max_workers=1))]
    # The checks only one kind of job runs, each placed before the check that follows it in that job's report.
    names = [version.NAME, *dict.fromkeys(check.name for check in checks(sliced, max_workers=1))]
    for name, after in itertools.pairwise(names):
        if name not in declared:
            declared.insert(declared.index(after), name)
    listed = re.findall(r"^\| `([a-z-]+)`", table_of("readiness-checks"), flags=re.M)
    assert listed == declared


def test_the_config_pages_example_loads(tmp_path: Path) -> None:
    example = re.findall(r"```yaml\n(.*?)```", page("config.md"), flags=re.S)[0]
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


def test_the_readme_is_a_front_page_whose_links_land() -> None:
    assert len(README.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert {link for link in local if link.startswith("docs/")} >= {"docs/index.md", "docs/config.md"}
    assert [link for link in local if not (REPO / link).is_file()] == []
    linked = {Path(link).name for link in local}
    pages = {p.name for p in PAGES if p.read_text(encoding="utf-8").count("\n") > 1}  # with more than a title
    assert pages - linked - {"index.md"} == set(), "each page with content is linked from the README"


def test_the_site_builds_with_strict(tmp_path: Path) -> None:
    """Broken links, missing anchors and pages left out of the navigation are errors (mkdocs.yml's validation)."""
    pytest.importorskip("mkdocs", reason="mkdocs comes with the dev extras: pip install -e '.[dev]'")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    build(load_config(str(REPO / "mkdocs.yml"), site_dir=str(tmp_path / "site"), strict=True))
    assert (tmp_path / "site" / "config" / "index.html").is_file()
