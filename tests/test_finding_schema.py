"""`pwdeploy schema --finding`: the JSON Schema of one finding, held to what check, diagnose, preflight and validate
really print in ``-o json`` (jsonschema, draft 2020-12, as the oracle), and strict enough to refuse a finding that
lost a key or has another severity."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from pwdeploy.cli import cli
from pwdeploy.finding import Finding
from tests.conftest import REPO, ClusterCli
from tests.diagnose_cases import load, names, serve
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer

EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")
TRAPS = "import jax\nimport pathwaysutils\n\nDEVICES = jax.devices()\npathwaysutils.initialize()\n"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    result = CliRunner().invoke(cli, ["schema", "--finding"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def conforms(validator: jsonschema.Draft202012Validator, findings: list[dict[str, Any]]) -> None:
    assert findings, "no finding to hold to the schema"
    for finding in findings:
        errors = [e.message for e in validator.iter_errors(finding)]
        assert not errors, (finding, errors)


def test_check_prints_findings_the_schema_holds(validator: jsonschema.Draft202012Validator, tmp_path: Any) -> None:
    (tmp_path / "train.py").write_text(TRAPS, encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "train.py"), "-o", "json"])
    conforms(validator, json.loads(result.stdout)["findings"])


def test_validate_prints_findings_the_schema_holds(validator: jsonschema.Draft202012Validator, tmp_path: Any) -> None:
    jobset = rendered_jobset()
    jobset["spec"]["coordinator"] = {"replicatedJob": "no-such-job"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(jobset), encoding="utf-8")
    result = CliRunner().invoke(cli, ["validate", str(path), "-o", "json"])
    assert result.exit_code == 3, result.output
    conforms(validator, json.loads(result.stdout)["findings"])


@pytest.mark.parametrize("case", [case for case in names() if load(case)["expect"]["cause"]])
def test_diagnose_prints_findings_the_schema_holds_against_stub(
    validator: jsonschema.Draft202012Validator,
    stub: StubKubeApiServer,
    cluster_cli: ClusterCli,
    kc: list[str],
    case: str,
) -> None:
    serve(stub, load(case))
    result = cluster_cli(["diagnose", "dp-example", *kc, "-o", "json"])
    conforms(validator, json.loads(result.stdout)["findings"])


def test_preflight_prints_rows_the_schema_holds_against_stub(
    validator: jsonschema.Draft202012Validator, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    result = cluster_cli(["preflight", "-f", EXAMPLE, "--cluster", "--no-gcs", "-o", "json", *kc])
    conforms(validator, json.loads(result.stdout)["checks"])


@pytest.mark.parametrize(
    "broken",
    [
        {"severity": "fatal"},
        {"count": 0},
        {"fix": 3},
        {"id": ""},
    ],
    ids=["another severity", "count 0", "fix not text", "empty id"],
)
def test_the_schema_refuses_a_finding_out_of_shape(
    validator: jsonschema.Draft202012Validator, broken: dict[str, Any]
) -> None:
    finding = Finding("init-order", "error", "train.py:4", "jax used first", "call initialize() first").as_json()
    assert validator.is_valid(finding)
    assert not validator.is_valid(finding | broken)
    for key in finding:
        assert not validator.is_valid({k: v for k, v in finding.items() if k != key}), key


def test_markdown_and_finding_together_are_refused() -> None:
    result = CliRunner().invoke(cli, ["schema", "--finding", "--markdown"])
    assert result.exit_code == 2 and "--markdown and --finding" in result.output
