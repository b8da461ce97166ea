"""Submit against StubKubeApiServer (a loopback stub, not an API server): what the official client sends
(paths, dryRun=All, the pwdeploy field manager, bodies equal to the rendered manifests), re-submits, --replace and
the preflight gate. The readiness checks themselves are tested in test_readiness_stub.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pwdeploy import __version__
from pwdeploy import identifiers as ids
from pwdeploy.cli import cli
from pwdeploy.cluster.submit import (
    DryRun,
    InterruptedReplace,
    config_hash,
    mark_managed,
    submit,
)
from pwdeploy.errors import ClusterError, PwdeployError
from pwdeploy.kube.seam import Kube
from tests.conftest import REPO, ClusterCli, SeamRunner
from tests.fake_clock import FakeClock
from tests.kube_answers import APPLY_PATCH
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer

EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")
JOBSET_PATH = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/demo"


def tiny_jobset(slices: int = 2) -> dict[str, Any]:
    return rendered_jobset("demo", slices=slices)


# ---------------------------------------------------------------------------------------------- marking


def test_mark_managed_records_hash_and_keeps_the_rendered_object() -> None:
    rendered = tiny_jobset()
    (marked,) = mark_managed([rendered], "default")
    assert rendered == tiny_jobset()  # not mutated
    digest = marked["metadata"]["annotations"].pop(ids.CONFIG_HASH_ANNOTATION)
    assert marked == rendered and digest == config_hash([rendered]) and len(digest) == 16


def test_config_hash_ignores_bookkeeping_but_not_the_spec() -> None:
    base = config_hash([tiny_jobset()])
    other_version = tiny_jobset()
    other_version["metadata"]["annotations"][ids.VERSION_ANNOTATION] = "9.9.9"
    assert config_hash([other_version]) == base
    assert config_hash([tiny_jobset(slices=3)]) != base


def test_mark_managed_adds_missing_labels() -> None:
    bare = tiny_jobset()
    del bare["metadata"]["labels"], bare["metadata"]["annotations"], bare["metadata"]["namespace"]
    (marked,) = mark_managed([bare], "team")
    meta = marked["metadata"]
    assert meta["namespace"] == "team" and meta["labels"] == {ids.MANAGED_BY_LABEL: ids.MANAGED_BY}
    assert meta["annotations"][ids.VERSION_ANNOTATION] == __version__


# ---------------------------------------------------------------------------------------------- submit (library)


def test_submit_applies_the_marked_object_with_the_pwdeploy_field_manager(kube: Kube, stub: StubKubeApiServer) -> None:
    objects = mark_managed([tiny_jobset()], "default")
    outcome = submit(kube, objects)
    assert outcome.result == "created"
    (patch,) = stub.writes()
    assert (patch.method, patch.path) == ("PATCH", JOBSET_PATH)
    assert patch.query == {"fieldManager": ["pwdeploy"], "fieldValidation": ["Strict"]}
    assert patch.headers["Content-Type"] == APPLY_PATCH
    assert patch.body == objects[0]
    stored = stub.get("jobsets", "default", "demo")
    assert stored is not None and stored["metadata"]["managedFields"][0]["manager"] == "pwdeploy"


def test_resubmitting_the_same_job_is_unchanged(kube: Kube, stub: StubKubeApiServer) -> None:
    objects = mark_managed([tiny_jobset()], "default")
    submit(kube, objects)
    before = len(stub.writes())
    assert submit(kube, objects).result == "unchanged"
    assert len(stub.writes()) == before


def test_a_different_spec_is_refused_without_replace(kube: Kube, stub: StubKubeApiServer) -> None:
    submit(kube, mark_managed([tiny_jobset()], "default"))
    with pytest.raises(ClusterError, match="already exists in namespace default with a different config") as info:
        submit(kube, mark_managed([tiny_jobset(slices=3)], "default"))
    assert "pass `replace`" in str(info.value)
    assert len(stub.writes()) == 1


def test_a_jobset_not_made_by_pwdeploy_is_refused(kube: Kube, stub: StubKubeApiServer) -> None:
    stub.put("jobsets", {**tiny_jobset(), "metadata": {"name": "demo", "namespace": "default"}})
    with pytest.raises(ClusterError, match="was not created by pwdeploy"):
        submit(kube, mark_managed([tiny_jobset()], "default"))
    assert stub.writes() == []


def _applied_by_kubectl(rendered: dict[str, Any], *, record: bool) -> dict[str, Any]:
    """``rendered`` as `kubectl apply -f` leaves it: pwdeploy's managed-by label (render sets it), no config hash,
    and, applied client-side, the last-applied-configuration annotation kubectl records (the applied JSON)."""
    live = copy.deepcopy(rendered)
    annotations = live["metadata"].setdefault("annotations", {})
    annotations.pop(ids.CONFIG_HASH_ANNOTATION, None)
    if record:
        annotations["kubectl.kubernetes.io/last-applied-configuration"] = json.dumps(rendered)
    return live


def test_a_render_kubectl_applied_with_this_config_is_unchanged(kube: Kube, stub: StubKubeApiServer) -> None:
    rendered = tiny_jobset()
    assert rendered["metadata"]["labels"][ids.MANAGED_BY_LABEL] == ids.MANAGED_BY
    stub.put("jobsets", _applied_by_kubectl(rendered, record=True))
    assert submit(kube, mark_managed([tiny_jobset()], "default")).result == "unchanged"
    assert stub.writes() == []


def test_a_render_kubectl_applied_with_another_config_is_a_different_config(
    kube: Kube, stub: StubKubeApiServer
) -> None:
    stub.put("jobsets", _applied_by_kubectl(tiny_jobset(slices=3), record=True))
    with pytest.raises(ClusterError, match="with a different config"):
        submit(kube, mark_managed([tiny_jobset()], "default"))


def test_a_render_applied_server_side_is_pwdeploys_of_unknown_config(kube: Kube, stub: StubKubeApiServer) -> None:
    stub.put("jobsets", _applied_by_kubectl(tiny_jobset(), record=False))
    with pytest.raises(ClusterError, match="applied from `pwdeploy render` by another client") as info:
        submit(kube, mark_managed([tiny_jobset()], "default"))
    assert "not created by pwdeploy" not in str(info.value) and "pass `replace`" in (info.value.hint or "")
    assert stub.writes() == []


def test_replace_confirms_deletes_waits_and_recreates(kube: Kube, stub: StubKubeApiServer, clock: FakeClock) -> None:
    submit(kube, mark_managed([tiny_jobset()], "default"))
    stub.linger_after_delete = 2  # foreground deletion: the JobSet stays visible for two more GETs
    questions: list[str] = []
    new = mark_managed([tiny_jobset(slices=3)], "default")

    def confirm(question: str) -> bool:
        questions.append(question)
        return True

    outcome = submit(kube, new, replace=True, confirm=confirm)
    assert outcome.result == "replaced" and "Delete jobset demo in namespace default" in questions[0]
    delete, patch = stub.writes()[1:]
    assert delete.method == "DELETE" and delete.q("propagationPolicy") == "Foreground" and delete.q("dryRun") is None
    assert patch.method == "PATCH" and patch.body == new[0]
    assert clock.sleeps == [2.0, 2.0]
    stored = stub.get("jobsets", "default", "demo")
    assert stored is not None and stored["spec"]["replicatedJobs"][1]["replicas"] == 3


def test_resubmitting_an_ended_job_says_so_and_replace_runs_it_again(kube: Kube, stub: StubKubeApiServer) -> None:
    objects = mark_managed([tiny_jobset()], "default")
    submit(kube, objects)
    stored = stub.get("jobsets", "default", "demo")
    assert stored is not None
    stored["status"] = {"conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}]}
    outcome = submit(kube, objects)
    assert (outcome.result, outcome.ended) == ("unchanged", "Completed")
    assert outcome.describe(DryRun.NONE).endswith(
        "unchanged; it already ended (Completed): pass --replace to run it again"
    )
    assert len(stub.writes()) == 1
    again = submit(kube, objects, replace=True, confirm=lambda q: True)
    assert again.result == "replaced"
    assert [w.method for w in stub.writes()] == ["PATCH", "DELETE", "PATCH"]
    rerun = stub.get("jobsets", "default", "demo")
    assert rerun is not None and "status" not in rerun


def test_replace_of_a_running_job_with_the_same_config_is_unchanged(kube: Kube, stub: StubKubeApiServer) -> None:
    objects = mark_managed([tiny_jobset()], "default")
    submit(kube, objects)
    assert submit(kube, objects, replace=True, confirm=lambda q: True).result == "unchanged"
    assert len(stub.writes()) == 1


def test_ctrl_c_while_the_old_job_is_deleted_says_what_is_left(
    kube: Kube, stub: StubKubeApiServer, clock: FakeClock
) -> None:
    submit(kube, mark_managed([tiny_jobset()], "default"))
    stub.linger_after_delete = 5

    def interrupt(sleeps: int) -> None:
        raise KeyboardInterrupt

    clock.on_sleep = interrupt
    with pytest.raises(InterruptedReplace) as info:
        submit(kube, mark_managed([tiny_jobset(slices=3)], "default"), replace=True, confirm=lambda q: True)
    assert info.value.exit_code == 130
    assert str(info.value).startswith("interrupted while jobset demo was being deleted: the old job is going away")
    assert [w.method for w in stub.writes()] == ["PATCH", "DELETE"], "nothing created after the interrupt"


def test_replace_declined_changes_nothing(kube: Kube, stub: StubKubeApiServer) -> None:
    submit(kube, mark_managed([tiny_jobset()], "default"))
    with pytest.raises(PwdeployError, match="not replaced"):
        submit(kube, mark_managed([tiny_jobset(slices=3)], "default"), replace=True, confirm=lambda q: False)
    assert len(stub.writes()) == 1


def test_server_dry_run_sends_dry_run_all_and_persists_nothing(kube: Kube, stub: StubKubeApiServer) -> None:
    outcome = submit(kube, mark_managed([tiny_jobset()], "default"), dry_run=DryRun.SERVER)
    (patch,) = stub.writes()
    assert patch.q("dryRun") == "All" and patch.q("fieldManager") == "pwdeploy"
    assert stub.get("jobsets", "default", "demo") is None
    assert "would be created: the API server accepted it" in outcome.describe(DryRun.SERVER)


def test_server_dry_run_replace_checks_the_delete_only(kube: Kube, stub: StubKubeApiServer) -> None:
    submit(kube, mark_managed([tiny_jobset()], "default"))
    outcome = submit(kube, mark_managed([tiny_jobset(slices=3)], "default"), dry_run=DryRun.SERVER, replace=True)
    delete = stub.writes()[-1]
    assert delete.method == "DELETE" and delete.q("dryRun") == "All"
    assert stub.get("jobsets", "default", "demo") is not None
    described = outcome.describe(DryRun.SERVER)
    assert "would be deleted and created again: the API server accepted the delete" in described
    assert "the new spec is admitted only once the old job is gone" in described


def test_client_dry_run_sends_no_writes(kube: Kube, stub: StubKubeApiServer) -> None:
    outcome = submit(kube, mark_managed([tiny_jobset()], "default"), dry_run=DryRun.CLIENT)
    assert stub.writes() == [] and "client dry run, nothing sent" in outcome.describe(DryRun.CLIENT)


# ---------------------------------------------------------------------------------------------- CLI


@pytest.fixture
def cli_env(kc: list[str]) -> list[str]:
    return kc


def rendered_example(*flags: str) -> list[dict[str, Any]]:
    result = SeamRunner().invoke(cli, ["render", "-f", EXAMPLE, "-o", "json", *flags])
    assert result.exit_code == 0, result.output
    return [json.loads(result.stdout)]


def test_cli_submit_sends_exactly_the_rendered_manifest(
    cluster_cli: ClusterCli, cli_env: list[str], stub: StubKubeApiServer
) -> None:
    result = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight"])
    assert result.exit_code == 0, result.output
    assert "jobset dp-example (namespace default, config " in result.stdout and ") created" in result.stdout
    (patch,) = stub.writes()
    rendered = rendered_example()
    expected = copy.deepcopy(rendered[0])
    expected["metadata"]["annotations"][ids.CONFIG_HASH_ANNOTATION] = config_hash(rendered)
    assert patch.path == "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/dp-example"
    assert patch.body == expected

    again = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight"])
    assert again.exit_code == 0 and ") unchanged" in again.stdout
    changed = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight", "--num-slices", "3"])
    assert changed.exit_code == 4 and "with a different config" in changed.output
    assert "Traceback" not in changed.output and len(stub.writes()) == 1


def test_a_submit_that_loses_a_race_to_another_config_says_so_without_the_dumped_spec(
    cluster_cli: ClusterCli, cli_env: list[str], stub: StubKubeApiServer
) -> None:
    """Two submits of different configs under one name at once: both find no JobSet, the first creates it and
    JobSet's webhook refuses the second's apply (403: its spec is immutable), quoting the whole new spec (6.8 KB
    for a 2-slice job on the real webhook) before the reason. The error names the race and the reason, not the
    dump."""
    from tests.kube_answers import status_body

    first = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight"])
    assert first.exit_code == 0, first.output
    not_found = status_body(404, "NotFound", 'jobsets.jobset.x-k8s.io "dp-example" not found',
                            {"name": "dp-example", "group": "jobset.x-k8s.io", "kind": "jobsets"})  # fmt: skip
    stub.answer("GET", r"/jobsets/dp-example$", not_found, status=404, times=10)  # the other submit's look
    raced = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight", "--num-slices", "3"])
    assert raced.exit_code == 4, raced.output
    said = raced.stderr
    assert "JobSet's webhook: spec.replicatedJobs: Invalid value (" in said, said
    assert "characters, left out): field is immutable" in said, said
    assert "created meanwhile" in said and "--replace" in said, said
    assert '"pathways-head"' not in said and len(said) < 1200, said


def test_a_long_server_message_keeps_its_end_where_the_reason_is() -> None:
    """Any error quoting a server's message longer than 2,000 characters keeps its start and its end."""
    from pwdeploy.kube.answers import MESSAGE_CHARS, quoted_message

    message = "admission webhook denied the request: " + "x" * 5000 + " because the quota is spent"
    shown = quoted_message(message)
    assert len(shown) < MESSAGE_CHARS + 60 and shown.endswith("because the quota is spent"), shown
    assert "characters left out) ..." in shown and shown.startswith("admission webhook denied the request: xxx")


def test_cli_submit_replace_asks_first(cluster_cli: ClusterCli, cli_env: list[str], stub: StubKubeApiServer) -> None:
    cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight"])
    args = ["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight", "--num-slices", "3", "--replace"]
    declined = cluster_cli(args, input="n\n")
    assert declined.exit_code == 1 and "not replaced" in declined.output and len(stub.writes()) == 1
    accepted = cluster_cli([*args, "--yes"])
    assert accepted.exit_code == 0, accepted.output
    assert ") replaced" in accepted.stdout and [w.method for w in stub.writes()] == ["PATCH", "DELETE", "PATCH"]


def test_cli_server_dry_run(cluster_cli: ClusterCli, cli_env: list[str], stub: StubKubeApiServer) -> None:
    result = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight", "--dry-run=server"])
    assert result.exit_code == 0, result.output
    assert "server dry run, nothing persisted" in result.stdout
    assert [w.q("dryRun") for w in stub.writes()] == ["All"] and stub.objects == {}


def test_cli_short_namespace_alias(cluster_cli: ClusterCli, cli_env: list[str], stub: StubKubeApiServer) -> None:
    result = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight", "-n", "team"])
    assert result.exit_code == 0, result.output
    assert stub.writes()[0].path.startswith("/apis/jobset.x-k8s.io/v1alpha2/namespaces/team/jobsets/")
    clash = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "-n", "team", "--namespace", "other"])
    assert clash.exit_code == 2 and "-n: 'team' contradicts --namespace 'other'" in clash.output


def test_cli_missing_crd_with_skip_preflight_fails_at_the_api(
    cluster_cli: ClusterCli, cli_env: list[str], stub: StubKubeApiServer
) -> None:
    stub.jobset_installed = False
    result = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight"])
    assert result.exit_code == 4 and "does not serve jobset.x-k8s.io/v1alpha2 (404)" in result.output
    assert "CustomResourceDefinition is not installed" in result.output and stub.writes() == []


def test_cli_forbidden_apply_prints_rbac_fix(
    cluster_cli: ClusterCli, cli_env: list[str], stub: StubKubeApiServer
) -> None:
    stub.forbid("patch", "jobsets")
    result = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight"])
    assert result.exit_code == 4
    announced, rest = result.output.split("\n", 1)  # a write names its context and server first
    assert announced == f"pwdeploy: context stub, server {stub.url}"
    assert rest.startswith('error: forbidden (403): jobsets.jobset.x-k8s.io "dp-example" is forbidden')
    assert "kubectl auth can-i patch jobsets.jobset.x-k8s.io -n default" in result.output


def test_cli_preflight_failure_blocks_submit_without_gcs_credentials(
    cluster_cli: ClusterCli,
    cli_env: list[str],
    stub: StubKubeApiServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    for var in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "CLOUDSDK_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    result = cluster_cli(["submit", "-f", EXAMPLE, *cli_env])
    assert result.exit_code == 6, result.output
    assert "preflight failed; nothing was submitted" in result.output and "--skip-preflight" in result.output
    assert "no Application Default Credentials found" in result.output
    assert [w for w in stub.writes() if w.q("dryRun") != "All"] == []  # jobset-api dry-runs a probe


def test_cli_headless_points_at_pwdeploy_connect(
    cluster_cli: ClusterCli, cli_env: list[str], stub: StubKubeApiServer
) -> None:
    result = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight", "--headless"])
    assert result.exit_code == 0, result.output
    assert "pwdeploy connect dp-example -n default -- python3 explore.py" in result.stdout
    assert "kubectl port-forward" not in result.stdout


def test_cli_submit_without_namespace_uses_the_context_namespace(
    cluster_cli: ClusterCli, stub: StubKubeApiServer, tmp_path: Path
) -> None:
    kubeconfig = stub.write_kubeconfig(tmp_path / "kc", {"team-ctx": ("stub-token", "team")}, current="team-ctx")
    config = tmp_path / "job.yaml"
    text = Path(EXAMPLE).read_text(encoding="utf-8").replace("namespace: default\n", "")
    config.write_text(text, encoding="utf-8")
    assert "namespace" not in rendered_example_from(config)[0]["metadata"]  # kubectl apply decides, as it does
    result = cluster_cli(["submit", "-f", str(config), "--kubeconfig", str(kubeconfig), "--skip-preflight"])
    assert result.exit_code == 0, result.output
    (patch,) = stub.writes()
    assert patch.path == "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team/jobsets/dp-example"
    assert patch.body["metadata"]["namespace"] == "team"


def rendered_example_from(config: Path) -> list[dict[str, Any]]:
    result = SeamRunner().invoke(cli, ["render", "-f", str(config), "-o", "json"])
    assert result.exit_code == 0, result.output
    return [json.loads(result.stdout)]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--timeout", "60"], "error: --timeout: applies only to --wait"),
        (["--wait", "--dry-run=server"], "error: --wait: a --dry-run=server creates nothing to wait for"),
    ],
)
def test_flags_that_would_be_ignored_are_refused(
    cluster_cli: ClusterCli, cli_env: list[str], stub: StubKubeApiServer, flags: list[str], message: str
) -> None:
    result = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--skip-preflight", *flags])
    assert result.exit_code == 2 and result.stderr.startswith(message), result.output
    assert stub.requests == [], "refused before connecting"


def test_cli_submit_passes_region_to_its_preflight(
    cluster_cli: ClusterCli, cli_env: list[str], stub: StubKubeApiServer
) -> None:
    """--region reaches the GCS checks of submit as it does those of preflight: a zone is refused by name."""
    result = cluster_cli(["submit", "-f", EXAMPLE, *cli_env, "--region", "us-central1-a"])
    assert result.exit_code == 2, result.output
    assert "--region: 'us-central1-a' is not a GCP region" in result.output and "not the zone" in result.output
    assert stub.writes() == []
