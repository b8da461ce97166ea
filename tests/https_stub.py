"""HttpsStubKubeApiServer: StubKubeApiServer (a loopback stub, not an API server, serving HTTPS with the test
session's CA from tests/tls.py) with a kubeconfig writer for any user entry (an exec plugin, say).

Credentials are only ever sent to an https server (as kubectl does), so every test of what pwdeploy sends as
credentials talks to an HTTPS stub."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from tests.kube_stub import StubKubeApiServer


class HttpsStubKubeApiServer(StubKubeApiServer):
    """The stub (HTTPS: ``tls`` must stay true) and a kubeconfig of one user entry that trusts its CA."""

    def __init__(self, **kwargs: Any) -> None:
        if not kwargs.get("tls", True):
            raise ValueError("HttpsStubKubeApiServer serves HTTPS only")
        super().__init__(**kwargs)

    def write_user_kubeconfig(self, path: Path, user: dict[str, Any], *, context: str = "c") -> Path:
        """A kubeconfig with one context whose user entry is ``user``, trusting the stub's CA."""
        assert self.ca_pem is not None
        ca_data = base64.b64encode(self.ca_pem).decode()
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
