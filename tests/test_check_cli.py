"""`pwdeploy check` as users call it: the example job is clean, findings read as compilers print them and as JSON,
ignore comments, syntax errors in user code, the rules that read the job config, and the check that `local run`
and `preflight` run first."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from pwdeploy.check.rules import rule_table
from pwdeploy.cli import cli
from pwdeploy.errors import CheckError
from tests.conftest import REPO
from tests.jobfiles import write_job

EXAMPLE = REPO / "examples" / "data_parallel"
SEVERAL = """\
import jax
import pathwaysutils

DEVICES = jax.devices()


def main(ds):
    pathwaysutils.initialize()
    ds = ds.shard(jax.process_count(), jax.process_index())
    if jax.process_index() == 0:
        print(len(DEVICES))
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def check(runner: CliRunner, *args: str) -> tuple[int, str]:
    result = runner.invoke(cli, ["check", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("config", ["job.yaml", "sidecar/job.yaml"])
def test_the_example_job_is_clean(runner: CliRunner, config: str) -> None:
    code, output = check(runner, "-f", str(EXAMPLE / config), "-o", "json")
    assert code == 0, output
    report = json.loads(output)
    assert report["findings"] == []
    assert {Path(f).name for f in report["files"]} >= {"train.py", "checkpointing.py", "loaders.py"}


def test_several_rules_in_one_program_read_as_compilers_print_them(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "train.py", SEVERAL)
    write(tmp_path, "data.py", "import os\nWORKERS = os.cpu_count()\n")
    code, output = check(runner, "train.py", "data.py")
    lines = [line for line in output.splitlines() if not line.startswith(("    fix:", "pwdeploy check:"))]
    assert code == CheckError.exit_code
    assert lines[0].startswith("train.py:4: error init-order: jax.devices() runs before pathwaysutils.initialize()")
    assert lines[1].startswith("train.py:9: warning process-sharding: ds.shard(jax.process_count(), ")
    assert lines[2].startswith("train.py:10: info process-index-guard: jax.process_index() == 0 is always true")
    assert lines[3].startswith("data.py:2: warning cpu-count: os.cpu_count() is the node's vCPU count")
    assert "pwdeploy check: 2 files: 1 error, 2 warnings, 1 info" in output
    assert "error: 1 error finding(s): init-order" in output


def test_json_findings_carry_every_field(runner: CliRunner, tmp_path: Path) -> None:
    entry = write(tmp_path, "train.py", SEVERAL)
    code, output = check(runner, str(entry), "-o", "json")
    first = json.loads(output[: output.rindex("}") + 1])["findings"][0]
    assert code == CheckError.exit_code
    # The one shape of every finding (docs/output.md), and check's own keys from before it (a contract).
    assert set(first) == {"id", "severity", "where", "message", "fix", "source", "count", "rule", "file", "line"}
    assert (first["rule"], first["severity"], first["line"]) == ("init-order", "error", 4)
    assert (first["id"], first["where"]) == ("init-order", f"{first['file']}:4")
    assert "pathways-utils" in first["source"] and first["fix"]


def test_warnings_alone_exit_0(runner: CliRunner, tmp_path: Path) -> None:
    entry = write(tmp_path, "train.py", "import os\nprint(os.cpu_count())\n")
    code, output = check(runner, str(entry))
    assert code == 0, output
    assert "warning cpu-count" in output


def test_an_ignore_comment_silences_its_rule_only_on_its_line(runner: CliRunner, tmp_path: Path) -> None:
    source = """\
    import jax, pathwaysutils
    pathwaysutils.initialize()
    jax.distributed.initialize()  # pwdeploy: ignore[distributed-initialize]
    jax.distributed.initialize()  # pwdeploy: ignore[cpu-count]
    NOTE = "jax.distributed.initialize()  # pwdeploy: ignore[distributed-initialize]"
    import os; n = os.cpu_count(); jax.distributed.initialize()  # pwdeploy: ignore[cpu-count, distributed-initialize]
    """
    entry = write(tmp_path, "train.py", source)
    code, output = check(runner, str(entry), "-o", "json")
    report = json.loads(output[: output.rindex("}") + 1])
    assert [(f["rule"], f["line"]) for f in report["findings"]] == [("distributed-initialize", 4)]
    assert report["ignored"] == 3
    assert code == CheckError.exit_code


def test_a_syntax_error_in_user_code_is_a_finding_not_a_crash(runner: CliRunner, tmp_path: Path) -> None:
    broken = write(tmp_path, "broken.py", "def f(:\n    pass\n")
    fine = write(tmp_path, "fine.py", "import os\nn = os.cpu_count()\n")
    binary = tmp_path / "latin.py"
    binary.write_bytes(b"x = '\xff'\n")
    code, output = check(runner, str(tmp_path), "-o", "json")
    report = json.loads(output[: output.rindex("}") + 1])
    found = {(Path(f["file"]).name, f["rule"], f["line"]) for f in report["findings"]}
    assert code == CheckError.exit_code
    assert found == {("broken.py", "syntax-error", 1), ("latin.py", "syntax-error", 0), ("fine.py", "cpu-count", 2)}
    assert broken.exists() and fine.exists()


def test_nothing_to_check_is_a_usage_error(runner: CliRunner, tmp_path: Path) -> None:
    code, output = check(runner)
    assert code == 2
    assert "nothing to check" in output


def test_the_entry_module_and_what_it_imports_from_the_job_folder(runner: CliRunner, tmp_path: Path) -> None:
    write(tmp_path, "train.py", "import pathwaysutils\nfrom pkg import data\npathwaysutils.initialize()\n")
    (tmp_path / "pkg").mkdir()
    write(tmp_path / "pkg", "__init__.py", "")
    write(tmp_path / "pkg", "data.py", "from . import helpers\n")
    write(tmp_path / "pkg", "helpers.py", "import multiprocessing\nN = multiprocessing.cpu_count()\n")
    write(tmp_path, "unused.py", "import os\nN = os.cpu_count()\n")
    job = write_job(tmp_path, "chk", main={"image": "r.example/m:1", "command": "python3 -u train.py --steps 3"})
    code, output = check(runner, "-f", str(job), "-o", "json")
    report = json.loads(output)
    assert code == 0, output
    assert sorted(Path(f).name for f in report["files"]) == ["__init__.py", "data.py", "helpers.py", "train.py"]
    assert [(Path(f["file"]).name, f["rule"]) for f in report["findings"]] == [("helpers.py", "cpu-count")]


def test_the_rendered_main_container_decides_the_cpu_backend(runner: CliRunner, tmp_path: Path) -> None:
    write(tmp_path, "train.py", "import jax, pathwaysutils\npathwaysutils.initialize()\nc = jax.devices('cpu')\n")
    job = write_job(tmp_path, "chk", main={"image": "r.example/m:1", "command": "python3 train.py"})
    code, output = check(runner, "-f", str(job))
    assert code == CheckError.exit_code
    assert "train.py:3: error host-cpu-backend: jax.devices('cpu') asks for the host CPU backend, but the " in output
    assert "rendered main container has JAX_PLATFORMS=proxy" in output


def test_a_sidecar_whose_jax_differs_from_the_client(runner: CliRunner, tmp_path: Path) -> None:
    write(tmp_path, "train.py", "import pathwaysutils\npathwaysutils.initialize()\n")
    (tmp_path / "requirements.txt").write_text("grain==0.2.18\njax==0.9.0\n", encoding="utf-8")
    sidecar = "us-docker.pkg.dev/p/r/sidecar:20260423-python_3.12-jax_0.9.0"
    job = write_job(
        tmp_path,
        "chk",
        main={"image": "r.example/m:1", "command": "python3 train.py"},
        sidecar={"image": sidecar},
        image={"requirements": "requirements.txt"},
    )
    code, output = check(runner, "-f", str(job), "-o", "json")
    found = [
        (Path(f["file"]).name, f["line"], f["rule"]) for f in json.loads(output[: output.rindex("}") + 1])["findings"]
    ]
    assert code == CheckError.exit_code
    line = next(n for n, text in enumerate(job.read_text().splitlines(), start=1) if sidecar in text)
    assert found == [("job.yaml", line, "sidecar-versions"), ("requirements.txt", 2, "sidecar-versions")]


def test_docs_rule_table_is_the_code_s() -> None:
    text = (REPO / "docs" / "check.md").read_text(encoding="utf-8")
    assert rule_table() in text, "docs/check.md's rule table differs from pwdeploy.check.rules.rule_table()"


FAILS_ON_PATHWAYS = """\
import sys
if len(sys.argv) > 5:
    import jax
    jax.distributed.initialize()
print("ran")
"""


def pwdeploy(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pwdeploy", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def failing_job(tmp_path: Path) -> Path:
    write(tmp_path, "train.py", FAILS_ON_PATHWAYS)
    return write_job(tmp_path, "chk", main={"image": "r.example/m:1", "command": "python3 train.py"})


def test_local_run_checks_first_and_goes_on(failing_job: Path, tmp_path: Path) -> None:
    done = pwdeploy("local", "run", "-f", str(failing_job), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran\n"
    assert "train.py:4: error distributed-initialize: jax.distributed.initialize()" in done.stderr
    assert "running anyway, but 1 finding(s) above would fail on Pathways (distributed-initialize)" in done.stderr
    skipped = pwdeploy("local", "run", "-f", str(failing_job), "--no-check", cwd=tmp_path)
    assert skipped.returncode == 0 and "pwdeploy check" not in skipped.stderr


def test_preflight_stops_on_an_error_finding(failing_job: Path, tmp_path: Path) -> None:
    done = pwdeploy("preflight", "-f", str(failing_job), "--no-gcs", cwd=tmp_path)
    assert done.returncode == CheckError.exit_code, done.stderr
    assert "error distributed-initialize" in done.stderr
    assert "preflight stopped" in done.stderr


def test_render_and_help_do_not_import_the_check() -> None:
    code = (
        "import sys\n"
        "from pwdeploy.cli import cli\n"
        "for argv in (['--help'], ['render', '-f', %r], ['check', '--help']):\n"
        "    try:\n"
        "        cli.main(argv)\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, (argv, e.code)\n"
        "print('CHECK', sorted(m for m in sys.modules if m.startswith('pwdeploy.check')), file=sys.stderr)\n"
    ).replace("%r", repr(str(EXAMPLE / "job.yaml")))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "CHECK []" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (("python3", "-u", "train.py", "--steps", "3"), "train.py"),
        (("python", "-W", "ignore", "train.py"), "train.py"),
        (("python3.12", "-m", "pkg.train"), "pkg/train.py"),
        (("python3", "-m", "pkg"), "pkg/__main__.py"),
        (("train.py",), "train.py"),
        (("python3", "-c", "print(1)"), None),
        (("bash", "run.sh"), None),
    ],
)
def test_the_entry_module_of_main_command(tmp_path: Path, command: tuple[str, ...], expected: str | None) -> None:
    from pwdeploy.check.locate import locate
    from pwdeploy.config import load_job

    (tmp_path / "pkg").mkdir()
    for name in ("train.py", "pkg/train.py", "pkg/__main__.py"):
        (tmp_path / name).write_text("", encoding="utf-8")
    main = {"image": "r.example/m:1", "command": "true"}
    job = load_job(write_job(tmp_path, "chk", main=main), {}, installed_jax=lambda: "0.10.2")
    found = locate(job._replace(main=job.main._replace(command=command))).script
    assert found == ((tmp_path / expected).resolve() if expected else None)


def test_a_planted_escape_in_the_source_stays_inert(runner: CliRunner, tmp_path: Path) -> None:
    entry = write(tmp_path, "train.py", "import os\nn = os.cpu_count(  # \x1b]0;owned\x07\n)\n")
    code, output = check(runner, str(entry))
    assert code == 0, output
    assert "\x1b" not in output and "^[]0;owned^G" in output
