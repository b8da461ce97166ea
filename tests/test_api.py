"""pwdeploy.api, the library's face: a config from a file or a (nested) mapping, render, validate, the program
check and the local plan against the real rooms; the cluster functions against StubKubeApiServer (a loopback stub,
not an API server, so those tests say so in their names); every public name documented; `import pwdeploy` and
render's path import none of it."""

from __future__ import annotations

import inspect
import io
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pwdeploy import api
from pwdeploy import identifiers as ids
from pwdeploy.check import check as check_room
from pwdeploy.config import load_job
from pwdeploy.errors import ArgumentError, ClusterError, ConfigError, ConfigErrors, ValidationError
from pwdeploy.kube.seam import Kube
from tests.conftest import REPO
from tests.fake_clock import FakeClock
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
MAIN = {"image": "python:3.11.9-slim", "command": "python3 train.py"}
loose: Any = api  # the face, called with what its types do not allow (as from untyped code)


def jax() -> str:
    return "0.10.2"  # the example's images are for jax 0.10.2, whatever this machine has installed


def example_mapping() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text())
    assert isinstance(data, dict)
    return data


# ---------------------------------------------------------------------------------------------- the job


def test_a_nested_mapping_loads_as_the_file_with_the_same_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    from_file = api.load(EXAMPLE, installed_jax=jax)
    monkeypatch.chdir(EXAMPLE.parent)  # a mapping's relative paths are read from here, a file's from its folder
    assert api.load(example_mapping(), installed_jax=jax) == from_file
    assert from_file == load_job(EXAMPLE, installed_jax=jax)


def test_dotted_keys_and_overrides_merge_as_the_flags_do() -> None:
    job = api.load(
        {
            "name": "a",
            "tpu.type": "v5p-8",
            "storage.scratch": "gs://stub-bucket/scratch",
            "main": {**MAIN, "env": {"A": "1", "B": "2"}},
        },
        {"tpu.slices": 3, "main.env": {"B": "3"}},
        installed_jax=jax,
    )
    assert job.name == "a" and job.tpu.slices == 3
    assert dict(job.main.env) == {"A": "1", "B": "3"}  # key by key, as --env on top of the file's env
    assert api.load(str(EXAMPLE), {"tpu.slices": 4}, installed_jax=jax).tpu.slices == 4


def test_a_mapping_with_mistakes_names_each_field() -> None:
    with pytest.raises(ConfigError) as unknown:
        api.load({**example_mapping(), "tpu": {"type": "v5p-8", "slicez": 2}}, installed_jax=jax)
    assert unknown.value.field == "tpu.slicez" and "did you mean 'slices'" in str(unknown.value)
    with pytest.raises(ConfigErrors) as several:
        api.load(example_mapping(), {"tpu.slices": 0, "name": "Not_A_Name"}, installed_jax=jax)
    assert {e.field for e in several.value.errors} >= {"tpu.slices", "name"}
    assert {e.source for e in several.value.errors if e.field in ("tpu.slices", "name")} == {"overrides"}
    with pytest.raises(ConfigError) as from_mapping:
        api.load({**example_mapping(), "tpu": {"type": "v5p-8", "slices": 0}}, installed_jax=jax)
    assert from_mapping.value.line().startswith("tpu.slices: ") and from_mapping.value.source == "the config mapping"
    with pytest.raises(ConfigError, match="a path or a mapping, not a list"):
        api.load([1, 2], installed_jax=jax)  # type: ignore[arg-type]


def test_render_validates_and_prints_as_the_command_does() -> None:
    job = api.load(EXAMPLE, installed_jax=jax)
    objects = api.render(job)
    assert [o["kind"] for o in objects] == ["JobSet"] and objects[0]["metadata"]["name"] == "dp-example"
    assert api.validate(objects) == []
    golden = (REPO / "manifests" / "dp-example.yaml").read_text()
    assert list(yaml.safe_load_all(api.to_yaml(objects))) == list(yaml.safe_load_all(golden))
    objects[0]["spec"]["replicatedJobs"][0]["replicas"] = -1
    problems = api.validate(objects)
    assert problems and any("replicas" in p.where for p in problems)


def test_render_raises_the_validation_error_for_what_the_schemas_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    from pwdeploy import manifests

    job = api.load(EXAMPLE, installed_jax=jax)
    broken = api.render(job, validate=False)
    broken[0]["spec"]["replicatedJobs"][0]["replicas"] = -1
    monkeypatch.setattr(manifests, "build", lambda job: broken)  # a public function: what render is given
    with pytest.raises(ValidationError) as caught:
        api.render(job)
    assert caught.value.exit_code == 3 and any("replicas" in p.where for p in caught.value.findings)


def test_manifests_are_written_and_validated_as_the_commands_do(tmp_path: Path) -> None:
    job = api.load(EXAMPLE, installed_jax=jax)
    written = api.write_manifests(api.render(job), tmp_path / "out")
    assert api.validate_files([str(path) for path in written]) == api.ManifestCheck(len(written), ())
    assert api.to_json(api.render(job)).startswith("{")
    with pytest.raises(ConfigError, match="is a pwdeploy job config, not Kubernetes manifests"):
        api.validate_files([EXAMPLE])
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(ArgumentError, match=r"^output_dir: cannot write to") as caught:
        api.write_manifests(api.render(job), blocked)
    assert caught.value.field == "output_dir"


def test_the_program_check_is_the_commands(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import jax\njax.distributed.initialize()\nprint(jax.devices())\n")
    job = api.load(
        {"name": "c", "tpu": {"type": "v5p-8"}, "storage": {"scratch": "gs://stub-bucket/scratch"}, "main": MAIN},
        installed_jax=jax,
    )._replace(base_dir=tmp_path)
    report = api.check(job)
    assert report == check_room(job, [])
    assert report.findings, "the planted program calls jax.distributed.initialize(): a rule says so"
    assert all(f.where.rpartition(":")[0].endswith("train.py") for f in report.findings)


def test_the_local_plan_is_what_local_run_would_start(tmp_path: Path) -> None:
    job = api.load(EXAMPLE, installed_jax=jax)
    plan = api.plan_local(job, cwd=tmp_path, cores=4, environ={})
    assert plan.command == (sys.executable, "train.py", "--steps", "200") and plan.cwd == EXAMPLE.parent
    assert plan.devices == 8  # 2 slices of v5p-8: 4 chips each
    assert plan.env["TRAIN_SEED"] == "0"
    other = api.plan_local(job, ["python3", "-c", "pass"], cwd=tmp_path, cores=4, environ={})
    assert other.command == (sys.executable, "-c", "pass") and other.cwd == tmp_path.resolve()


def test_run_local_works_from_a_worker_thread(tmp_path: Path) -> None:
    """Python lets only the main thread handle signals: a run from asyncio.to_thread (or an executor) installs
    none, where signal.signal would raise ValueError."""
    import asyncio

    job = api.load(EXAMPLE, installed_jax=jax)
    command = [sys.executable, "-c", "print('ran')"]
    run = asyncio.run(
        asyncio.to_thread(
            api.run_local, job, command, api.LocalRunOptions(check_program=False, check_limits=False), cwd=tmp_path
        )
    )
    assert run.exit_status == 0 and run.attempts == 1


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda job: loose.check(job, "/abs/train.py"), "paths"),  # iterated: "/", "a", ... (the whole machine)
        (lambda job: loose.plan_local(job, "python3 train.py"), "command"),
        (lambda job: loose.run_local(job, "python3 train.py"), "command"),
        (lambda job: loose.run_local(job, options=api.LocalRunOptions(lose_slices="1@40")), "lose_slices"),
        (lambda job: loose.run_local(job, options=api.LocalRunOptions(restore_slices="1@80")), "restore_slices"),
        (lambda job: loose.validate("jobset.yaml"), "objects"),
        (lambda job: loose.to_yaml("jobset.yaml"), "objects"),
    ],
    ids=["check", "plan_local", "run_local", "lose_slices", "restore_slices", "validate", "to_yaml"],
)
def test_a_str_where_a_list_is_meant_is_refused(call: Any, argument: str) -> None:
    with pytest.raises(ConfigError) as caught:
        call(loose.load(EXAMPLE, installed_jax=jax))
    assert caught.value.field == argument and "must be a list, not a str" in str(caught.value)


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda job: loose.load(EXAMPLE, "tpu.slices=3"), "overrides"),
        (lambda job: loose.render({"name": "x"}), "job"),
        (lambda job: loose.warnings(str(EXAMPLE)), "job"),
        (lambda job: loose.check(job, [3]), "paths[0]"),
        (lambda job: loose.plan_local(job, ["python3", 3]), "command[1]"),
        (lambda job: loose.plan_local(job, cores="4"), "cores"),
        (lambda job: loose.plan_local(job, environ={"A": 1}), "environ['A']"),
        (lambda job: loose.plan_local(job, environ={"A": "x\x00y"}), "environ['A']"),  # Popen's ValueError once
        (lambda job: loose.run_local(job, options=api.LocalRunOptions(fail_at_step="3")), "fail_at_step"),  # type: ignore[arg-type]
        (lambda job: loose.run_local(job, options=api.LocalRunOptions(kill_after="3")), "kill_after"),  # type: ignore[arg-type]
        (lambda job: loose.run_local(job, options=api.LocalRunOptions(kill_after=float("nan"))), "kill_after"),
        (lambda job: loose.run_local(job, options={"resume": True}), "options"),
        (lambda job: loose.run_local(job, environ=["A=1"]), "environ"),
        (lambda job: loose.cluster(namespace=5), "namespace"),
        (lambda job: loose.cluster(kubeconfig=5), "kubeconfig"),
        (lambda job: loose.check(config_file=5), "config_file"),
    ],
)
def test_a_wrong_type_is_the_callers_config_error_naming_the_argument(call: Any, argument: str) -> None:
    with pytest.raises(ArgumentError) as caught:
        call(api.load(EXAMPLE, installed_jax=jax))
    assert caught.value.field == argument and isinstance(caught.value, ConfigError)


def test_run_local_reads_its_flags_given_as_keywords_with_a_deprecation_warning(tmp_path: Path) -> None:
    """The signature before LocalRunOptions (docs promised it): the same run, and a warning that says what to use."""
    job = api.load(EXAMPLE, installed_jax=jax)
    command = [sys.executable, "-c", "print('ran')"]
    with pytest.warns(DeprecationWarning, match=r"run_local\(check_program=\.\.\., check_limits=\.\.\.\)"):
        run = loose.run_local(job, command, cwd=tmp_path, check_program=False, check_limits=False)
    assert run.exit_status == 0 and run.peaks is None  # check_limits=False was read
    with pytest.raises(ArgumentError, match="is not an argument of run_local") as caught:
        loose.run_local(job, command, cwd=tmp_path, resum=True)
    assert caught.value.field == "resum"


def test_the_program_check_reads_the_job_from_a_config_file_given_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a notebook user has is a path as a str: check(config_file="job.yaml") reads the job from it."""
    monkeypatch.chdir(EXAMPLE.parent)
    monkeypatch.setattr("pwdeploy.config.installed_jax_version", jax)
    report = api.check(config_file="job.yaml")
    job = load_job(EXAMPLE, installed_jax=jax)
    assert report == api.check(job, config_file=EXAMPLE) == check_room(job, [], config_file=EXAMPLE)
    assert report.files, "the job's entry module was read"


def test_the_result_types_and_the_errors_are_importable_from_the_face() -> None:
    from pwdeploy.api import ClusterError as Face
    from pwdeploy.api import JobStatus, Report
    from pwdeploy.check.results import Report as Room
    from pwdeploy.cluster.status import JobStatus as Status

    assert (Face, Report, JobStatus) == (ClusterError, Room, Status)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        api.nothing  # noqa: B018


# ---------------------------------------------------------------------------------------------- the cluster


@pytest.fixture
def cluster(kube: Kube) -> api.Cluster:
    return api.Cluster(kube, "default")


def test_cluster_resolves_the_context_and_namespace_against_the_stub(kubeconfig: Path) -> None:
    cluster = api.cluster(str(kubeconfig))
    assert cluster.namespace == "default" and cluster.kube.context == "stub"
    assert api.cluster(kubeconfig, namespace="team").namespace == "team"
    with pytest.raises(ArgumentError, match="not a valid namespace"):
        api.cluster(kubeconfig, namespace="Team_A")
    with pytest.raises(ArgumentError, match=r"^kubeconfig: .* does not exist"):
        api.cluster(kubeconfig.parent / "missing")
    with pytest.warns(DeprecationWarning, match="api.connect is deprecated: it is api.cluster"):
        old = api.connect(kubeconfig, namespace="team")
    assert (old.namespace, old.kube.context, old.kube.host) == ("team", "stub", cluster.kube.host)


def test_cluster_is_built_whole_with_the_callers_bounds(kubeconfig: Path) -> None:
    """The client's bounds and where a slow request is told are given when the cluster is built, never set on it
    afterwards."""
    heard: list[str] = []
    limits = api.RequestLimits(timeout=(1.0, 2.0), deadline=3.0, slow_after=0.5)
    settings = api.ClientSettings(clock=FakeClock(), requests=limits)
    kube = api.cluster(kubeconfig, on_notice=heard.append, settings=settings).kube
    assert (kube.timeout, kube.deadline, kube.slow_after) == ((1.0, 2.0), 3.0, 0.5)
    assert kube.on_wait == heard.append and isinstance(kube.clock, FakeClock)


def test_submit_status_diagnose_delete_against_the_stub(cluster: api.Cluster, stub: StubKubeApiServer) -> None:
    job = api.load(EXAMPLE, installed_jax=jax)
    dry = api.submit(cluster, job, api.SubmitOptions(dry_run="client"))
    assert dry.result == "created" and stub.writes() == []
    outcome = api.submit(cluster, job)
    assert (outcome.name, outcome.namespace, outcome.result) == ("dp-example", "default", "created")
    assert stub.get("jobsets", "default", "dp-example") is not None
    assert api.submit(cluster, job).result == "unchanged"
    with pytest.raises(ClusterError, match="pass `replace`"):
        api.submit(cluster, job._replace(tpu=job.tpu._replace(slices=3)))
    changed = job._replace(tpu=job.tpu._replace(slices=3))
    with pytest.warns(DeprecationWarning, match=r"submit\(replace=\.\.\.\) is deprecated"):
        assert loose.submit(cluster, changed, replace=True).result == "replaced"

    found = api.status(cluster, "dp-example")
    assert found.name == "dp-example" and found.jobset["metadata"]["name"] == "dp-example"
    diagnosis = api.diagnose(cluster, "dp-example")
    assert diagnosis.job == "dp-example" and diagnosis.requests > 0

    api.delete(cluster, "dp-example", wait=True)
    assert stub.get("jobsets", "default", "dp-example") is None
    with pytest.raises(ClusterError, match="jobset dp-example not found in namespace default"):
        api.status(cluster, "dp-example")


def test_submit_refuses_a_bad_dry_run_mode_before_any_request_against_the_stub(
    cluster: api.Cluster, stub: StubKubeApiServer
) -> None:
    with pytest.raises(ConfigError, match="valid: none, client, server"):
        api.submit(cluster, api.load(EXAMPLE, installed_jax=jax), api.SubmitOptions(dry_run="yes"))  # type: ignore[arg-type]
    assert stub.requests == []


def test_delete_refuses_a_jobset_pwdeploy_did_not_make_against_the_stub(
    cluster: api.Cluster, stub: StubKubeApiServer
) -> None:
    foreign = rendered_jobset()
    foreign["metadata"]["labels"] = {}
    stub.put("jobsets", foreign)
    with pytest.raises(ClusterError, match="not managed by pwdeploy"):
        api.delete(cluster, "dp-example")
    assert stub.writes() == []


def test_wait_returns_the_state_or_raises_against_the_stub(
    cluster: api.Cluster, stub: StubKubeApiServer, clock: FakeClock
) -> None:
    stub.put("jobsets", rendered_jobset(status={"conditions": [{"type": "Completed", "status": "True"}]}))
    lines = io.StringIO()
    assert api.wait(cluster, "dp-example", progress=lines).phase == "Completed"
    assert lines.getvalue().startswith("Completed")
    failed = {"conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "m"}]}
    stub.put("jobsets", rendered_jobset("other", status=failed))
    with pytest.raises(ClusterError, match="job other failed: FailedJobs: m"):
        api.wait(cluster, "other")
    stub.put("jobsets", rendered_jobset("slow"))
    with pytest.raises(ClusterError, match="is not running after 10 s"):
        api.wait(cluster, "slow", until="running", timeout=10)


def test_logs_are_the_containers_bytes_against_the_stub(cluster: api.Cluster, stub: StubKubeApiServer) -> None:
    stub.put("jobsets", rendered_jobset())
    pod = f"dp-example-{ids.WORKER_JOB}-1-0-x7k2p"
    labels = {
        ids.JOBSET_NAME_LABEL: "dp-example",
        ids.REPLICATED_JOB_LABEL: ids.WORKER_JOB,
        ids.JOB_INDEX_LABEL: "1",
        ids.COMPLETION_INDEX_LABEL: "0",
    }
    spec = {"containers": [{"name": ids.WORKER_CONTAINER}]}
    stub.put("pods", {"metadata": {"name": pod, "namespace": "default", "labels": labels}, "spec": spec})
    stub.logs[("default", pod, ids.WORKER_CONTAINER)] = b"boot\n\xffstep 1\n"
    assert b"".join(api.logs(cluster, "dp-example", component="worker", slice_index=1)) == b"boot\n\xffstep 1\n"
    with pytest.raises(ClusterError, match=f"no {ids.HEAD_JOB} pod yet for job dp-example"):
        api.logs(cluster, "dp-example")
    with pytest.raises(ConfigError, match="is not a job name"):
        api.logs(cluster, "job.yaml")


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda cluster: loose.status(cluster, 123), "name"),
        (lambda cluster: loose.status(("kube", "default"), "dp-example"), "cluster"),
        (lambda cluster: loose.logs(cluster, "dp-example", tail="10"), "tail"),
        (lambda cluster: loose.logs(cluster, "dp-example", slice_index="1"), "slice_index"),
        (lambda cluster: loose.logs(cluster, "dp-example", host=True), "host"),
        (lambda cluster: loose.wait(cluster, "dp-example", timeout="10"), "timeout"),
        (lambda cluster: loose.submit(cluster, str(EXAMPLE)), "job"),
    ],
)
def test_a_wrong_type_is_refused_before_any_request_against_the_stub(
    call: Any, argument: str, cluster: api.Cluster, stub: StubKubeApiServer
) -> None:
    """Sent on, a wrong type would come back as the API server's refusal: the server blamed for the caller."""
    stub.put("jobsets", rendered_jobset())
    with pytest.raises(ConfigError) as caught:
        call(cluster)
    assert caught.value.field == argument and stub.requests == []


# ---------------------------------------------------------------------------------------------- the face


def test_every_public_name_has_a_docstring_and_a_place_in_the_api_page() -> None:
    page = (REPO / "docs" / "api.md").read_text()
    for name in api.__all__:
        obj = getattr(api, name)
        assert inspect.getdoc(obj), f"pwdeploy.api.{name} has no docstring"
        assert re.search(rf"`(api\.)?{name}\b", page), f"docs/api.md does not document {name}"


def test_every_public_function_is_fully_typed() -> None:
    for name in api.__all__:
        obj = getattr(api, name)
        if inspect.isfunction(obj):
            hints = inspect.signature(obj)
            assert hints.return_annotation is not inspect.Signature.empty, name
            assert all(p.annotation is not inspect.Parameter.empty for p in hints.parameters.values()), name


def test_import_pwdeploy_does_not_import_the_api_and_render_imports_only_the_jobs_face() -> None:
    """`import pwdeploy` stays as cheap as before; render, which calls the API as every command does, loads the
    face's package and the job's module only: no other face, no argument checks (those load only to say what is
    wrong)."""
    bare = _imported(["-c", "import pwdeploy"])
    assert "pwdeploy" in bare and "pwdeploy.api" not in bare
    render = {
        name for name in _imported(["-m", "pwdeploy", "render", "-f", str(EXAMPLE)]) if name.startswith("pwdeploy")
    }
    assert {name for name in render if name.startswith("pwdeploy.api")} == {"pwdeploy.api", "pwdeploy.api.job_api"}
    assert "pwdeploy.arguments" not in render


def _imported(argv: list[str]) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, cwd=REPO, check=True
    )
    return {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
