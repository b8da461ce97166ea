"""What the real API server and kubectl do with inputs pwdeploy refuses or must follow as they do: a memory
quantity with a fraction of a byte (the API server's own warning), a service-account token rotated on disk and
revoked on the server (a bound token whose Secret is deleted)."""

from __future__ import annotations

import base64
import secrets
import time
from pathlib import Path

import pytest
import yaml

from pwdeploy.cluster.jobsets import get_jobset
from pwdeploy.errors import ClusterError, ConfigError
from pwdeploy.kube.kubeconfig import load_kube
from tests.control_plane import ControlPlane
from tests.fake_clock import FakeClock

pytestmark = [pytest.mark.control_plane, pytest.mark.slow, pytest.mark.timeout(240)]


def test_the_api_server_warns_of_a_fractional_byte_memory_limit_that_pwdeploy_refuses(
    control_plane: ControlPlane,
) -> None:
    """`512m` of memory is 0.512 bytes: the API server admits it with a warning (pkg/api/pod/warnings.go), and the
    kubelet would round it up to one byte; pwdeploy's config refuses it for every memory field."""
    from pwdeploy import api

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "fraction", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"memory": "512m"}}}]},
    }
    done = control_plane.kubectl("apply", "--dry-run=server", "-f", "-", input_text=yaml.safe_dump(pod))
    assert 'fractional byte value "512m" is invalid, must be an integer' in done.stderr, done.stderr
    example = Path(__file__).resolve().parent.parent / "examples" / "data_parallel" / "job.yaml"
    for field in ("main.memory", "main.shm_size"):
        with pytest.raises(ConfigError, match=r"0\.512 bytes"):
            api.load(example, {field: "512m"}, installed_jax=lambda: "0.10.2")


def _token(plane: ControlPlane, account: str, secret: str) -> str:
    made = plane.kubectl(
        "create", "token", account, "-n", "default", "--duration=10m",
        "--bound-object-kind=Secret", f"--bound-object-name={secret}",
    )  # fmt: skip
    return made.stdout.strip()


def _kubeconfig(plane: ControlPlane, path: Path, user: dict[str, str]) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "plane",
                "cluster": {
                    "server": plane.server,
                    "certificate-authority-data": base64.b64encode(plane.ca.cert.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": "rotor", "user": user}],
        "contexts": [{"name": "plane", "context": {"cluster": "plane", "user": "rotor", "namespace": "default"}}],
        "current-context": "plane",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_a_token_file_rotated_on_disk_is_read_again_before_the_old_token_is_refused(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """A projected service-account token is rotated by the kubelet on disk; once the old one is revoked, a client
    that read the file once gets 401 for the rest of a long follow. pwdeploy reads the file again after 50 s (a
    minute less client-go's leeway), as kubectl does. Here the old token is revoked by deleting the Secret it is
    bound to, and kubectl, given it, is refused."""
    plane, account = control_plane, f"rotor-{secrets.token_hex(3)}"
    old_secret, new_secret = f"{account}-a", f"{account}-b"
    plane.kubectl("create", "serviceaccount", account, "-n", "default")
    plane.kubectl("create", "role", account, "-n", "default", "--verb=get", "--resource=jobsets.jobset.x-k8s.io")
    plane.kubectl("create", "rolebinding", account, "-n", "default", f"--role={account}",
                  f"--serviceaccount=default:{account}")  # fmt: skip
    for secret in (old_secret, new_secret):
        plane.kubectl("create", "secret", "generic", secret, "-n", "default")
    try:
        token_file = tmp_path / "token"
        token_file.write_text(_token(plane, account, old_secret) + "\n")
        clock = FakeClock()
        kube = load_kube(_kubeconfig(plane, tmp_path / "kc", {"tokenFile": str(token_file)}), clock=clock)
        assert get_jobset(kube, "default", "absent") is None

        old = token_file.read_text().strip()
        token_file.write_text(_token(plane, account, new_secret) + "\n")  # rotated on disk
        plane.kubectl("delete", "secret", old_secret, "-n", "default")  # the old token is revoked
        with_old = _kubeconfig(plane, tmp_path / "old", {"token": old})
        deadline = time.monotonic() + 30
        asked = ("--kubeconfig", str(with_old), "get", "jobset", "absent", "-n", "default")
        while "Unauthorized" not in plane.kubectl(*asked, check=False).stderr:  # NotFound while it is taken
            assert time.monotonic() < deadline, "the API server still takes a token bound to a deleted Secret"
            time.sleep(0.5)

        clock.t += 49
        with pytest.raises(ClusterError, match="401"):  # still the token read 49 s ago, as client-go keeps it
            get_jobset(kube, "default", "absent")
        clock.t += 1
        assert get_jobset(kube, "default", "absent") is None  # the file read again: the new token
    finally:
        for kind, name in (("secret", new_secret), ("rolebinding", account), ("role", account),
                           ("serviceaccount", account)):  # fmt: skip
            plane.kubectl("delete", kind, name, "-n", "default", "--ignore-not-found", check=False)
