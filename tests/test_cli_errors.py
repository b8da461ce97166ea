"""Bad input through the CLI: every config problem at once, and the rough edges a new user meets (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from pwdeploy.cli import cli
from tests.conftest import REPO

FLAGS = [
    "--name", "demo", "--tpu-type", "v5p-8", "--image", "us-docker.pkg.dev/p/r/train:1",
    "--command", "python3 train.py", "--gcs-scratch", "gs://my-bucket/pathways",
]  # fmt: skip
GOOD = {
    "name": "demo",
    "tpu": {"type": "v5p-8"},
    "main": {"image": "us-docker.pkg.dev/p/r/train:1", "command": "python3 train.py"},
    "storage": {"scratch": "gs://my-bucket/pathways"},
}


def _write(tmp_path: Path, data: object, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def test_three_mistakes_in_file_flag_and_env_are_reported_together(runner: CliRunner, tmp_path: Path) -> None:
    path = _write(tmp_path, {**GOOD, "tpu": {"type": "v5p-8", "slices": 0}})
    result = runner.invoke(
        cli, ["render", "-f", str(path), "--main-memory", "12Q"], env={"PWDEPLOY_NAMESPACE": "Bad_NS"}
    )
    assert result.exit_code == 2, result.output
    lines = sorted(_errors(result.stderr))
    assert len(lines) == 3, result.stderr
    assert lines[0].startswith("error: main.memory: '12Q' is not a Kubernetes quantity")
    assert lines[0].endswith("(from --main-memory)")
    assert lines[1].startswith("error: namespace: 'Bad_NS'") and lines[1].endswith("(from PWDEPLOY_NAMESPACE)")
    assert lines[2].startswith("error: tpu.slices: must be an integer >= 1") and lines[2].endswith(f"(from {path})")
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_cross_field_checks_run_only_when_their_inputs_parsed(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["render", *FLAGS, "--main-memory", "8Gi", "--elastic-slices", "x"])
    lines = _errors(result.stderr)
    assert result.exit_code == 2 and len(lines) == 2, result.stderr
    assert "main.shm_size: 16Gi does not fit inside main.memory (8Gi)" in lines[1]  # memory and shm parsed
    assert "tpu.elastic_slices: must be an integer" in lines[0]  # so the elastic check did not run
    result = runner.invoke(cli, ["render", *FLAGS, "--main-memory", "lots"])
    lines = _errors(result.stderr)
    assert len(lines) == 1 and "main.memory: 'lots'" in lines[0], result.stderr


def test_unknown_fields_and_missing_fields_together(runner: CliRunner, tmp_path: Path) -> None:
    path = _write(tmp_path, {"nmae": "demo", "tpu": {"typ": "v5p-8"}, "pathways_version": "0.10.2"})
    result = runner.invoke(cli, ["render", "-f", str(path)])
    lines = _errors(result.stderr)
    assert result.exit_code == 2
    assert any(line.startswith("error: nmae: unknown field (did you mean 'name'?)") for line in lines)
    assert all(line.endswith(f"(from {path})") for line in lines if "unknown field" in line)
    assert any(line.startswith("error: tpu.typ: unknown field (did you mean 'type'?)") for line in lines)
    assert any(line.startswith("error: name: is required") for line in lines), result.stderr


@pytest.mark.parametrize(
    ("value", "parsed"), [("false", "--enable_gcs_olm=false"), ("0", "--enable_gcs_olm=false"), ("true", None)]
)
def test_boolean_env_defaults(runner: CliRunner, value: str, parsed: str | None) -> None:
    result = runner.invoke(cli, ["render", *FLAGS, "--no-validate"], env={"PWDEPLOY_GCS_OLM": value})
    assert result.exit_code == 0, result.output
    assert ("--enable_gcs_olm=false" in result.stdout) is (parsed is not None)


def test_headless_from_the_environment(runner: CliRunner) -> None:
    no_main = ["--name", "demo", "--tpu-type", "v5p-8", "--gcs-scratch", "gs://my-bucket/pathways", "--no-validate"]
    for value in ("1", "true"):
        result = runner.invoke(cli, ["render", *no_main], env={"PWDEPLOY_HEADLESS": value})
        assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["render", *no_main], env={"PWDEPLOY_HEADLESS": "false"})
    assert result.exit_code == 2 and "main.image: is required" in result.stderr
    result = runner.invoke(cli, ["render", *no_main], env={"PWDEPLOY_HEADLESS": "maybe"})
    assert result.exit_code == 2 and "headless: must be true or false, not 'maybe' (from PWDEPLOY_HEADLESS)" in (
        result.stderr
    )
    result = runner.invoke(cli, ["render", *no_main, "--headless"], env={"PWDEPLOY_HEADLESS": "false"})
    assert result.exit_code == 0, result.output  # the flag beats the environment


def test_debug_after_double_dash_belongs_to_the_program(runner: CliRunner, tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    result = runner.invoke(cli, ["local", "run", "-f", missing, "--", "python3", "x.py", "--debug"])
    assert result.exit_code == 2 and "does not exist" in result.stderr and "Traceback" not in result.stderr
    result = runner.invoke(cli, ["--debug", "local", "run", "-f", missing, "--", "python3", "x.py"])
    assert result.exit_code == 2 and "Traceback" in result.stderr


def test_config_that_is_not_utf8(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes("name: d\xe9mo\n".encode("latin-1"))
    result = runner.invoke(cli, ["render", "-f", str(path)])
    assert result.exit_code == 2, result.output
    assert f"config file {path} is not UTF-8 text (byte 0xe9 at offset 7)" in result.stderr
    assert "internal error" not in result.stderr


@pytest.mark.parametrize(
    ("section", "key", "flag"),
    [
        ("main", "image", "--image"),
        ("sidecar", "image", "--sidecar-image"),
        ("images", "server", "--server-image"),
        ("images", "proxy_server", "--proxy-server-image"),
        ("image", "base", "--image-base"),
    ],
)
def test_image_references_follow_the_oci_grammar(
    runner: CliRunner, tmp_path: Path, section: str, key: str, flag: str
) -> None:
    data: dict[str, dict[str, str]] = {**GOOD}  # type: ignore[dict-item]
    data[section] = {**data.get(section, {}), key: "us-docker.pkg.dev/p/r/train:1 extra"}
    result = runner.invoke(cli, ["render", "-f", str(_write(tmp_path, data))])
    assert result.exit_code == 2, result.output
    assert f"{section}.{key}: 'us-docker.pkg.dev/p/r/train:1 extra' is not an image reference" in result.stderr
    result = runner.invoke(cli, ["render", *FLAGS, flag, "Registry.example/Upper Case:1"])
    assert result.exit_code == 2 and f"(from {flag})" in result.stderr, result.output


def test_unwritable_output_dir_is_bad_input(runner: CliRunner, tmp_path: Path) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("")
    result = runner.invoke(cli, ["render", *FLAGS, "--output-dir", str(blocker / "out")])
    assert result.exit_code == 2, result.output
    assert f"--output-dir: cannot write to {blocker / 'out'}: Not a directory" in result.stderr
    assert "internal error" not in result.stderr


def test_pathways_version_read_as_a_float_suggests_quoting(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(GOOD) + "pathways_version: 0.10\n")
    result = runner.invoke(cli, ["render", "-f", str(path)])
    assert result.exit_code == 2
    assert "pathways_version: '0.1' is not a JAX version" in result.stderr
    assert 'quote it in YAML (pathways_version: "0.10.2")' in result.stderr


def test_render_with_no_config_at_all(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["render"])
    assert result.exit_code == 2 and _errors(result.stderr) == ["error: no job config given (-f FILE or flags)"]


def test_logs_of_a_file_name_says_so(runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = runner.invoke(cli, ["logs", "-f", "job.yaml"])
    assert result.exit_code == 2, result.output
    assert "'job.yaml' looks like a file, but logs takes the job's name (-f means --follow" in result.stderr
    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo").write_text("")
    result = runner.invoke(cli, ["logs", "demo"])
    assert result.exit_code == 2 and "'demo' looks like a file" in result.stderr


def test_missing_kubeconfig_from_flag_or_env_exit_alike(runner: CliRunner, tmp_path: Path) -> None:
    missing = str(tmp_path / "kubeconfig")
    by_flag = runner.invoke(cli, ["status", "demo", "--kubeconfig", missing])
    by_env = runner.invoke(cli, ["status", "demo"], env={"KUBECONFIG": missing})
    assert by_flag.exit_code == by_env.exit_code == 2, (by_flag.output, by_env.output)
    assert "does not exist" in by_flag.stderr and "names no existing file" in by_env.stderr


def test_missing_package_is_an_environment_error_exit_9(tmp_path: Path) -> None:
    manifest = tmp_path / "cm.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    code = (
        "import sys\n"
        "sys.modules['kubernetes_validate'] = None  # as if the package were not installed\n"
        "from pwdeploy.cli import main\n"
        f"main(['validate', {str(manifest)!r}])\n"
    )
    env = {"PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 9, result.stderr
    assert "error: the kubernetes-validate package is not installed" in result.stderr


def test_standalone_mode_false_raises_instead_of_exiting() -> None:
    from pwdeploy.errors import ConfigErrors

    with pytest.raises(ConfigErrors):
        cli.main(["render", "--tpu-type", "v9z-8"], standalone_mode=False)


NO_CLUSTER = {"KUBECONFIG": None, "KUBERNETES_SERVICE_HOST": None}
EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")


@pytest.mark.parametrize("args", [["status", "demo"], ["list"], ["submit", "-f", EXAMPLE, "--skip-preflight"]])
def test_no_kubeconfig_at_all_is_exit_2_naming_the_file(runner: CliRunner, tmp_path: Path, args: list[str]) -> None:
    result = runner.invoke(cli, args, env={**NO_CLUSTER, "HOME": str(tmp_path)})
    assert result.exit_code == 2, result.output
    assert f"error: no kubeconfig found: $KUBECONFIG is unset, {tmp_path}/.kube/config does not exist" in result.stderr


def test_malformed_kubeconfig_is_exit_2_with_file_and_line(runner: CliRunner, tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nusers:\n  - name: u\n   user: {}\n")
    by_flag = runner.invoke(cli, ["status", "demo", "--kubeconfig", str(bad)])
    by_env = runner.invoke(cli, ["status", "demo"], env={"KUBECONFIG": str(bad)})
    assert by_flag.exit_code == by_env.exit_code == 2, (by_flag.output, by_env.output)
    said = f"cannot read kubeconfig {bad}: line 5, column 4: "  # then libyaml's (or PyYAML's) words
    assert f"error: --kubeconfig: {said}" in by_flag.stderr and f"error: KUBECONFIG: {said}" in by_env.stderr


def test_a_kubeconfig_token_with_a_line_break_inside_is_exit_2_and_never_shown(
    runner: CliRunner, tmp_path: Path
) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "s", "cluster": {"server": "https://admin:hunter2@127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "s3cret-part-one\ns3cret-part-two\n"}}],
        "contexts": [{"name": "c", "context": {"cluster": "s", "user": "u"}}],
    }
    kc = _write(tmp_path, config, "kubeconfig")
    result = runner.invoke(cli, ["status", "demo", "--kubeconfig", str(kc)])
    assert result.exit_code == 2, result.output
    assert f"error: {kc}: user 'u' (context 'c'): the token is empty or has a space or line break" in result.stderr
    assert "s3cret" not in result.output and "hunter2" not in result.output


def test_preflight_cluster_without_a_cluster_still_checks_the_images(
    runner: CliRunner, tmp_path: Path, jax_version: str
) -> None:
    result = runner.invoke(
        cli,
        ["preflight", "-f", EXAMPLE, "--cluster", "--no-gcs", "-o", "json"],
        env={**NO_CLUSTER, "HOME": str(tmp_path)},
    )
    assert result.exit_code == 6, result.output
    checks = json.loads(result.stdout)["checks"]
    assert [c["check"] for c in checks] == ["cluster", "image", "image", "image", "image"]
    assert checks[0]["status"] == "failed" and checks[0]["detail"].startswith("not checked: no kubeconfig found")
    assert "get-credentials" in checks[0]["fix"]


def test_debug_after_the_command_says_where_it_goes(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["render", "-f", "job yaml", "--debug"])
    assert result.exit_code == 2
    assert result.stderr == (
        "error: --debug is pwdeploy's own option and goes before the command: pwdeploy --debug render -f 'job yaml'\n"
    )


def test_validate_given_a_job_config_suggests_render(runner: CliRunner, tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD)
    result = runner.invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: {path} is a pwdeploy job config, not Kubernetes manifests\n"
        f"  hint: render it (render validates what it writes): pwdeploy render -f {path}\n"
    )


def test_the_docs_show_validates_real_output(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = (REPO / "docs" / "render.md").read_text(encoding="utf-8")
    block = page[page.index("    $ pwdeploy validate demo.yaml\n") :].split("\n\n")[0]
    shown = [line.removeprefix("    ") for line in block.splitlines()[1:]]
    monkeypatch.chdir(tmp_path)
    flags = [
        *FLAGS[:2],
        "--tpu-type",
        "v5p-8",
        "--num-slices",
        "2",
        *FLAGS[4:8],
        "--gcs-scratch",
        "gs://my-bucket/pathways",
    ]
    rendered = runner.invoke(cli, ["render", *flags])
    assert rendered.exit_code == 0, rendered.output
    Path("demo.yaml").write_text(rendered.stdout.replace("replicatedJob: pathways-head\n", "replicatedJob: head\n", 1))
    result = runner.invoke(cli, ["validate", "demo.yaml"])
    assert result.exit_code == 3 and result.stderr.splitlines() == shown


def _commands_taking_a_job_name(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        assert command is not None
        if isinstance(command, click.Group):
            found += _commands_taking_a_job_name(command, (*path, name))
        elif any(isinstance(p, click.Argument) and p.name == "name" for p in command.params):
            found.append((*path, name))
    return found


@pytest.mark.parametrize("name", ["a" * 300, "a\x00b"], ids=["300 bytes", "NUL"])
def test_every_command_that_takes_a_name_refuses_one_no_file_could_have(runner: CliRunner, name: str) -> None:
    """A name longer than a file name may be was an internal error (ENAMETOOLONG from the looks-like-a-file
    check) in every command that takes one."""
    commands = _commands_taking_a_job_name(cli)
    assert {("status",), ("logs",), ("delete",), ("drill",), ("connect",)} <= set(commands), commands
    required: dict[tuple[str, ...], list[str]] = {("profile",): ["--duration", "1"]}
    for command in commands:
        result = runner.invoke(cli, [*command, *required.get(command, []), name])
        assert result.exit_code == 2, (command, result.output)
        assert "is not a job name" in result.stderr and "internal error" not in result.stderr, (command, result.stderr)


def _limited(address_space: int = 0, stack: int = 0) -> Callable[[], None]:
    def limit() -> None:
        import resource

        if address_space:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if stack:
            resource.setrlimit(resource.RLIMIT_STACK, (stack, stack))

    return limit


def test_a_config_file_that_never_ends_is_refused_after_a_bound() -> None:
    """`-f /dev/zero` was read until memory ran out (here: 2 GiB of address space, then an internal error)."""
    done = subprocess.run(
        [sys.executable, "-m", "pwdeploy", "render", "-f", "/dev/zero"], capture_output=True, text=True, timeout=60,
        cwd=REPO, preexec_fn=_limited(address_space=2 << 30),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: config file /dev/zero is more than 1 MiB: not a job config"), done.stderr


def test_a_command_line_and_environment_too_large_together_say_so_rather_than_blame_the_command(
    tmp_path: Path,
) -> None:
    """Each variable passes the config's bound (MAX_ARG_STRLEN); together they are more than ARG_MAX (a quarter of
    the stack limit: 1 MiB of stack here, so 256 KiB): E2BIG once blamed main.command."""
    job = tmp_path / "job.yaml"
    env = {f"BIG_{i}": "x" * 100_000 for i in range(3)}
    main = {"image": "r.example/m:1", "command": "true", "env": env}
    job.write_text(yaml.safe_dump({**GOOD, "allow_version_mismatch": True, "main": main}), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(job), "--devices", "1", "--no-check",
         "--compile-cache", ""],
        capture_output=True, text=True, timeout=120, cwd=REPO, preexec_fn=_limited(stack=1 << 20),
    )  # fmt: skip
    assert done.returncode == 7, done.stderr
    assert "Argument list too long" in done.stderr and "ARG_MAX" in done.stderr, done.stderr
    assert "check main.command" not in done.stderr


def _all_options() -> dict[str, set[str]]:
    """Every option of every command (subcommands too), by its flags; and the positional arguments by metavar."""
    from pwdeploy.cli import LazyGroup

    found: dict[str, set[str]] = {}

    def walk(command: click.Command, path: str) -> None:
        for param in command.params:
            names = param.opts if isinstance(param, click.Option) else [param.human_readable_name]
            for name in names:
                found.setdefault(name, set()).add(path)
        if isinstance(command, click.Group):
            context = click.Context(command)
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                if sub is not None:
                    walk(sub, f"{path} {name}")

    assert isinstance(cli, LazyGroup)
    walk(cli, "pwdeploy")
    return found


def test_each_argument_the_flag_table_names_is_given_by_a_flag_some_command_has() -> None:
    """The one table from API arguments to flags (cli/argument_flags.py) has no row for a flag no command has."""
    from pwdeploy.cli.argument_flags import FLAG_OF_ARGUMENT, flag_of

    options = _all_options()
    flags = {arg: flag_of(arg) for arg in FLAG_OF_ARGUMENT}
    stale = {arg: flag for arg, flag in flags.items() if flag and flag.startswith("-") and flag not in options}
    assert not stale, f"rows naming flags no command has: {stale}"


def test_an_api_argument_error_is_shown_with_its_flag() -> None:
    from pwdeploy.cli.argument_flags import as_flags
    from pwdeploy.errors import ArgumentError, ConfigError

    said = as_flags(ArgumentError("slice_index", "job x has no slice 3", hint="h"))
    assert str(said) == "--slice: job x has no slice 3\n  hint: h"
    named = as_flags(ArgumentError("name", "'Demo_1' is not a job name: ..."))
    assert str(named) == "'Demo_1' is not a job name: ..."
    config = ConfigError("namespace", "bad", source="--namespace")  # a job field's error keeps its field
    assert as_flags(config) is config


def test_the_arguments_an_error_names_in_backquotes_are_said_as_flags() -> None:
    """How the API names what a caller can change (`local_port=0`, `check_program=False`) is said as the flags
    that change it, in an argument's error and in any error's hint; a kubectl-style flag keeps its '='."""
    from pwdeploy.cli.argument_flags import as_said
    from pwdeploy.errors import ArgumentError, CheckError

    port = ArgumentError("local_port", "port 80 is in use", hint="pass another `local_port=N`, or `local_port=0`")
    assert as_said(port) == "--local-port: port 80 is in use\n  hint: pass another --local-port N, or --local-port 0"
    mode = ArgumentError("wait", "a `dry_run=server` creates nothing to wait for")
    assert as_said(mode) == "--wait: a --dry-run=server creates nothing to wait for"
    stopped = CheckError("the program would fail; preflight stopped", hint="fix them, or pass `check_program=False`")
    assert as_said(stopped) == "the program would fail; preflight stopped\n  hint: fix them, or pass --no-check"
    quoted = CheckError("`timeout` in a quoted log line", hint="the config's `name`")  # not arguments with flags
    assert as_said(quoted) == str(quoted)
