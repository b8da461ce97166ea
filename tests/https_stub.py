"""HttpsStubKubeApiServer: StubKubeApiServer (a loopback stub, not an API server) behind TLS, with a throwaway CA
made by openssl once per test module, and a kubeconfig writer for any user entry (an exec plugin, say).

Credentials are only ever sent to an https server (as kubectl does), so every test of what pwdeploy sends as
credentials talks to this stub."""

from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.kube_stub import StubKubeApiServer


def make_ca(folder: Path) -> tuple[Path, Path, Path]:
    """A CA certificate and a server certificate (and key) for 127.0.0.1 and localhost, signed by it."""
    if shutil.which("openssl") is None:
        raise RuntimeError("openssl is needed to make the stub's throwaway CA")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    ca, ca_key, cert, key = (folder / n for n in ("ca.crt", "ca.key", "server.crt", "server.key"))
    run = ["openssl", "req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", "2"]
    subprocess.run([*run, "-subj", "/CN=pwdeploy test CA"], check=True, capture_output=True)
    csr = folder / "server.csr"
    request = ["openssl", "req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1"]
    subprocess.run(request, check=True, capture_output=True)
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    sign = ["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial"]
    subprocess.run([*sign, "-out", str(cert), "-days", "2", "-extfile", str(folder / "san.cnf")], check=True)
    return ca, cert, key


class HttpsStubKubeApiServer(StubKubeApiServer):
    """The stub, serving https with a certificate of ``ca``."""

    def __init__(self, ca: tuple[Path, Path, Path], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        own_ca: bytes | None = getattr(self, "ca_pem", None)  # a stub that already speaks TLS is left as it is
        self.trusted_ca = own_ca if own_ca is not None else ca[0].read_bytes()
        if super().url.startswith("http://"):
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(ca[1], ca[2])
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)

    @property
    def url(self) -> str:
        return super().url.replace("http://", "https://", 1)

    def write_user_kubeconfig(self, path: Path, user: dict[str, Any], *, context: str = "c") -> Path:
        """A kubeconfig with one context whose user entry is ``user``, trusting the stub's CA."""
        ca_data = base64.b64encode(self.trusted_ca).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "stub", "cluster": {"server": self.url, "certificate-authority-data": ca_data}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": context, "context": {"cluster": "stub", "user": "u"}}],
            "current-context": context,
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path
