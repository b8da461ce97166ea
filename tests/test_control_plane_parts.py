"""The control plane's parts that need no binaries: KWOK's Stages parse and select what they say, the webhook
configurations point at 127.0.0.1 with the CA, node pools carry GKE's labels and taint, the user's Role is what
preflight's permissions row checks. (The tier that runs it: tests/test_control_plane.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pwdeploy.readiness.permissions import NEEDED
from tests.control_plane import NodePool, TpuPool, kwok, pki
from tests.control_plane.binaries import versions
from tests.control_plane.cluster import user_rules


def test_versions_are_read_from_the_one_file() -> None:
    pinned = versions()
    assert set(pinned) >= {"KUBERNETES_VERSION", "ETCD_VERSION", "JOBSET_VERSION", "KUEUE_VERSION", "KWOK_VERSION"}
    assert all(v.startswith("v") for v in pinned.values())


def test_kwok_stages_parse_and_the_exit_stage_reads_the_annotation() -> None:
    stages = [doc for doc in yaml.safe_load_all(kwok.config()) if doc]
    assert [s["metadata"]["name"] for s in stages] == [
        "node-ready",
        "node-heartbeat",
        "pod-running",
        "pod-ready-again",
        "pod-exit",
        "pod-stopped-by-sigterm",
        "pod-killed-after-grace",
        "pod-stopped-pending",
        "pod-gone",
    ]
    assert all(s["kind"] == "Stage" and s["apiVersion"] == "kwok.x-k8s.io/v1alpha1" for s in stages)
    exit_stage = stages[4]
    keys = [e["key"] for e in exit_stage["spec"]["selector"]["matchExpressions"]]
    assert f'.metadata.annotations["{kwok.EXIT_CODE}"]' in keys
    assert kwok.EXIT_CODE in exit_stage["spec"]["next"]["statusTemplate"]
    assert stages[-1]["spec"]["next"] == {"delete": True}
    # A deleted running pod: SIGTERM ends its processes a second later (143) where they are not PID 1 of their
    # containers or handle it, else the SIGKILL comes at the deletion's deadline (137).
    by_sigterm, after_grace = stages[5], stages[6]
    assert by_sigterm["spec"]["delay"] == {"durationMilliseconds": 1000}
    assert after_grace["spec"]["delay"]["durationFrom"] == {"expressionFrom": ".metadata.deletionTimestamp"}
    which = [e for e in by_sigterm["spec"]["selector"]["matchExpressions"] if "shareProcessNamespace" in e["key"]]
    assert [e["operator"] for e in which] == ["In"] and kwok.ON_SIGTERM in which[0]["key"]
    assert '"143"' in by_sigterm["spec"]["next"]["statusTemplate"]
    assert "exitCode: {{ $code }}" in after_grace["spec"]["next"]["statusTemplate"]
    assert '{{ $code := "137" }}' in after_grace["spec"]["next"]["statusTemplate"]


def test_a_tpu_pool_is_labelled_and_tainted_as_gke_does() -> None:
    nodes = NodePool("tpu-np", nodes=2, tpu=TpuPool("tpu-v5p-slice", "2x2x2", 4)).manifests()
    assert [n["metadata"]["name"] for n in nodes] == ["tpu-np-0", "tpu-np-1"]
    labels = nodes[0]["metadata"]["labels"]
    assert labels["cloud.google.com/gke-nodepool"] == "tpu-np"
    assert labels["cloud.google.com/gke-tpu-accelerator"] == "tpu-v5p-slice"
    assert labels["cloud.google.com/gke-tpu-topology"] == "2x2x2"
    assert nodes[0]["status"]["capacity"]["google.com/tpu"] == "4"
    assert nodes[0]["spec"]["taints"] == [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}]
    cpu = NodePool("cpu-np").manifests()[0]
    assert "google.com/tpu" not in cpu["status"]["capacity"] and "taints" not in cpu["spec"]


def test_client_certificates_carry_user_and_groups(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    ca = pki.new_authority(tmp_path)
    pair = ca.issue("admin", "admin", groups=("system:masters",))
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    cert.verify_directly_issued_by(ca_cert)


def test_the_users_role_is_what_the_permissions_row_checks() -> None:
    granted = {
        (g, r, v) for rule in user_rules() for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]
    }
    assert granted == {(r.group, r.rbac_resource, verb) for verb, r in NEEDED}


def test_webhooks_are_registered_as_the_components_kustomizations_deploy_them() -> None:
    from tests.control_plane import binaries
    from tests.control_plane.cluster import _jobset_patches, _kueue_hook

    if not binaries.have_go():
        pytest.skip(binaries.NO_GO)
    webhook = binaries.jobset_dir() / "config/components/webhook"
    adjust = _jobset_patches(webhook)
    jobset = {
        h["name"]: adjust(d["kind"], i, h)
        for d in yaml.safe_load_all((webhook / "manifests.yaml").read_text())
        for i, h in enumerate(d["webhooks"])
    }
    only_jobset_pods = {"matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}
    assert {n: (h or {}).get("objectSelector") for n, h in jobset.items()} == {
        "mjobset.kb.io": None,
        "mpod.kb.io": only_jobset_pods,
        "vjobset.kb.io": None,
        "vpod.kb.io": only_jobset_pods,
    }
    served = {"kueue.x-k8s.io", "batch", "jobset.x-k8s.io"}
    kueue = [
        hook["name"]
        for d in yaml.safe_load_all((binaries.kueue_dir() / "config/components/webhook/manifests.yaml").read_text())
        for i, h in enumerate(d["webhooks"])
        if (hook := _kueue_hook(served, d["kind"], i, h)) is not None
    ]
    assert {"mjob.kb.io", "vjobset.kb.io", "vworkload.kb.io"} <= set(kueue)
    assert "mpod.kb.io" not in kueue and "mdeployment.kb.io" not in kueue  # integrations not running


# ---------------------------------------------------------------------------------------------- its folder is private

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "control-plane.sh"
OTHER_UID = 65534  # nobody: another local user


def _script(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PWDEPLOY_CONTROL_PLANE_STATE": str(state)}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


def _planted(tmp_path: Path, how: str) -> Path:
    """A state folder someone else could have made first at the predictable path, holding an `env` to be eval-ed."""
    state = tmp_path / "state"
    if how == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        (tmp_path / "elsewhere" / "env").write_text("echo planted\n")
        state.symlink_to(tmp_path / "elsewhere")
        return state
    state.mkdir(mode=0o700)
    (state / "env").write_text("echo planted\n")
    if how == "another user's":
        os.chown(state, OTHER_UID, OTHER_UID)
    else:
        state.chmod(0o777)
    return state


@pytest.mark.parametrize("how", ["another user's", "open to all", "a link"])
def test_the_scripts_commands_refuse_a_state_folder_that_is_not_private(tmp_path: Path, how: str) -> None:
    """`eval "$(scripts/control-plane.sh env)"` ran the text of a folder another local user made first."""
    if how == "another user's" and os.getuid() != 0:
        pytest.skip("making a folder another user's needs root")
    state = _planted(tmp_path, how)
    for command in ("env", "stop", "start"):
        done = _script(state, command)
        assert done.returncode == 1, (command, done.stderr)
        assert done.stdout == "", (command, done.stdout)
        assert "not private" in done.stderr or "not a folder" in done.stderr, done.stderr
    assert (state / "env").read_text() == "echo planted\n"  # left as it was


def test_stop_ends_only_the_process_that_is_the_control_plane(tmp_path: Path) -> None:
    """A pid file naming any other process (a stale pid reused, a planted one) was killed."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        (state / "pid").write_text(f"{bystander.pid}\n")
        done = _script(state, "stop")
        assert done.returncode == 0, done.stderr
        assert f"pid {bystander.pid} in {state}/pid is not this control plane" in done.stderr
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_the_planes_keys_are_private_from_their_first_byte_and_its_folder_is_refused_unless_private(
    tmp_path: Path,
) -> None:
    from tests.control_plane.cluster import ControlPlane
    from tests.control_plane.processes import StartError

    certs = tmp_path / "pki"
    ca = pki.new_authority(certs)
    ca.issue("admin", "admin", groups=("system:masters",))
    pki.signing_key(certs)
    modes = {p.name: p.stat().st_mode & 0o777 for p in certs.iterdir() if p.suffix == ".key"}
    assert modes == {"ca.key": 0o600, "admin.key": 0o600, "sa.key": 0o600}
    assert certs.stat().st_mode & 0o777 == 0o700
    loose = tmp_path / "loose"
    loose.write_text("x")
    loose.chmod(0o644)
    assert pki.private_file(loose, b"secret").stat().st_mode & 0o777 == 0o600
    (tmp_path / "link").symlink_to(loose)
    with pytest.raises(OSError):  # a link is not followed
        pki.private_file(tmp_path / "link", b"secret")
    open_folder = tmp_path / "open"
    open_folder.mkdir(mode=0o755)
    with pytest.raises(StartError, match="is not private"):
        ControlPlane(open_folder, tmp_path)
