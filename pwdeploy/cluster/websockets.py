"""Opening a WebSocket to the API server with the TLS, client-certificate and proxy settings of the client's
``Configuration`` (what the official client's own stream helper reads, so a kubeconfig that works for requests
works for streams). Only ``Kube.open_websocket`` calls this: errors are converted there."""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit


def ssl_options(conf: Any) -> dict[str, Any]:
    """websocket-client's ``sslopt`` from a kubernetes ``Configuration``."""
    options: dict[str, Any] = {"cert_reqs": ssl.CERT_REQUIRED if conf.verify_ssl else ssl.CERT_NONE}
    for key, value in (
        ("ca_certs", conf.ssl_ca_cert),
        ("certfile", conf.cert_file),
        ("keyfile", conf.key_file),
        ("server_hostname", getattr(conf, "tls_server_name", None)),
    ):
        if value:
            options[key] = value
    if conf.verify_ssl and conf.assert_hostname is not None:
        options["check_hostname"] = bool(conf.assert_hostname)
    return options


def connect_websocket(
    conf: Any, url: str, headers: Mapping[str, str], subprotocols: Sequence[str], *, connect_timeout: float
) -> Any:
    """A connected ``websocket.WebSocket`` to ``url`` (http(s):// becomes ws(s)://); only the Authorization
    header is sent along. Raises websocket-client's exceptions or OSError."""
    import websocket

    ws = websocket.WebSocket(sslopt=ssl_options(conf), enable_multithread=True)
    options: dict[str, Any] = {
        "header": [f"{k}: {v}" for k, v in headers.items() if k.lower() == "authorization"],
        "subprotocols": list(subprotocols),
        "timeout": connect_timeout,
    }
    if conf.proxy:
        proxy = urlsplit(conf.proxy)
        options |= {"http_proxy_host": proxy.hostname, "http_proxy_port": proxy.port, "proxy_type": "http"}
    ws.connect("ws" + url.removeprefix("http"), **options)  # type: ignore[no-untyped-call]
    ws.settimeout(None)  # a stream may stay idle for hours; its readers block until data or a close
    return ws
