"""The control plane's parts that need no binaries: KWOK's Stages parse and select what they say, the webhook
configurations point at 127.0.0.1 with the CA, node pools carry GKE's labels and taint, the user's Role is what
preflight's permissions row checks. (The tier that runs it: tests/test_control_plane.py.)"""

from __future__ import annotations

from pathlib import Path

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
        "pod-exit",
        "pod-stopped",
        "pod-gone",
    ]
    assert all(s["kind"] == "Stage" and s["apiVersion"] == "kwok.x-k8s.io/v1alpha1" for s in stages)
    exit_stage = stages[3]
    keys = [e["key"] for e in exit_stage["spec"]["selector"]["matchExpressions"]]
    assert f'.metadata.annotations["{kwok.EXIT_CODE}"]' in keys
    assert kwok.EXIT_CODE in exit_stage["spec"]["next"]["statusTemplate"]
    assert stages[-1]["spec"]["next"] == {"delete": True}


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
    import pytest

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
