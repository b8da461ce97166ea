"""The TCP and TLS connection under a WebSocket to the API server, made from the kubernetes client's
``Configuration`` the way its REST requests are (``pwdeploy.kube.http_client.pool_manager``), so a kubeconfig
that works for requests works for streams: the same CA (file, or data; the system's roots when the kubeconfig
names none), client certificate, ``tls-server-name`` (sent as SNI and checked against the certificate),
``insecure-skip-tls-verify``, and proxy, with the same ``no_proxy`` decision. Nothing is read from the
environment here: the proxy is the one the Configuration holds.

Proxies: ``http://`` (an HTTP CONNECT tunnel, with Basic credentials from the URL's userinfo or the
Configuration's ``proxy_headers``) and ``socks5://``/``socks5h://`` (RFC 1928, with RFC 1929 credentials; socks5h
lets the proxy resolve the name). Failures are ``ApiError``: a TLS failure or a proxy's refusal is ``lasting``
(never retried: waiting does not change a certificate), a proxy that cannot be reached is not."""

from __future__ import annotations

import base64
import ipaddress
import socket
import ssl
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

from pwdeploy.kube.answers import printable, without_userinfo
from pwdeploy.kube.api_errors import ApiError
from pwdeploy.kube.tlsstream import TlsStream

MAX_PROXY_ANSWER = 16 << 10  # a CONNECT answer's head; a proxy is as untrusted as the server behind it
TLS_HINT = (
    "check the kubeconfig's certificate-authority(-data), tls-server-name and client certificate for this "
    "cluster (GKE: gcloud container clusters get-credentials CLUSTER --location LOCATION writes all three)"
)


def open_socket(conf: Any, url: str, timeout: float) -> socket.socket | TlsStream:
    """A connected socket to ``url``'s host (a ``TlsStream`` over it for https://), through the proxy when the
    Configuration has one for it; ``timeout`` bounds each step. OSError when nothing answers."""
    parts = urlsplit(url)
    host, secure = parts.hostname or "", parts.scheme in ("https", "wss")
    port = parts.port or (443 if secure else 80)
    proxy = proxy_for(conf)
    if proxy is None:
        sock = socket.create_connection((host, port), timeout)
    else:
        sock = _via_proxy(proxy, host, port, timeout, getattr(conf, "proxy_headers", None) or {})
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small messages (gRPC) go out at once
        return _tls(conf, sock, host) if secure else sock
    except BaseException:
        sock.close()
        raise


def proxy_for(conf: Any) -> str | None:
    """The Configuration's proxy, unless its ``no_proxy`` excludes the server (the REST client's own rule)."""
    proxy = getattr(conf, "proxy", None)
    if not proxy:
        return None
    from pwdeploy.kube.http_client import bypasses_proxy

    return None if bypasses_proxy(str(conf.host), getattr(conf, "no_proxy", None) or "") else str(proxy)


def tls_context(conf: Any) -> ssl.SSLContext:
    """The client side of TLS as the Configuration describes it; a CA or certificate that cannot be loaded is a
    lasting ApiError."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if conf.verify_ssl:
            ca_data = getattr(conf, "ca_cert_data", None)
            if conf.ssl_ca_cert or ca_data:
                context.load_verify_locations(cafile=conf.ssl_ca_cert or None, cadata=ca_data or None)
            else:
                context.load_default_certs(ssl.Purpose.SERVER_AUTH)
            context.check_hostname = conf.assert_hostname is not False
        else:  # insecure-skip-tls-verify
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if conf.cert_file:
            context.load_cert_chain(conf.cert_file, conf.key_file or None)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise ApiError(
            f"cannot load the TLS files of the kubeconfig for {without_userinfo(str(conf.host))}: {exc}",
            hint=TLS_HINT,
            lasting=True,
        ) from None
    return context


def _tls(conf: Any, sock: socket.socket, host: str) -> TlsStream:
    name = getattr(conf, "tls_server_name", None) or host
    try:
        return TlsStream(sock, tls_context(conf), name)
    except ssl.SSLError as exc:  # certificate verification, a handshake refused (a client certificate wanted)
        if isinstance(exc, ssl.SSLCertVerificationError):
            reason = f"certificate verify failed: {exc.verify_message}"
        else:
            reason = str(getattr(exc, "reason", None) or exc)
        checked = f" (checked as {name!r})" if name != host else ""
        raise ApiError(
            f"TLS with the API server {without_userinfo(str(conf.host))}{checked} failed: {printable(str(reason))}",
            hint=TLS_HINT,
            lasting=True,
        ) from None


# ---------------------------------------------------------------------------------------------- proxies


def _via_proxy(proxy: str, host: str, port: int, timeout: float, headers: dict[str, str]) -> socket.socket:
    parts = urlsplit(proxy)
    if parts.scheme not in ("http", "socks5", "socks5h") or not parts.hostname:
        raise ApiError(
            f"the kubeconfig's proxy-url {without_userinfo(proxy)} is not one pwdeploy connect can use for streams",
            hint="use an http://, socks5:// or socks5h:// proxy-url",
            lasting=True,
        )
    default_port = 80 if parts.scheme == "http" else 1080
    sock = socket.create_connection((parts.hostname, parts.port or default_port), timeout)
    try:
        if parts.scheme == "http":
            _connect_tunnel(sock, parts, host, port, headers)
        else:
            _socks5(sock, parts, host, port)
    except BaseException:
        sock.close()
        raise
    return sock


def _credentials(parts: SplitResult) -> tuple[str, str] | None:
    if parts.username is None:
        return None
    return unquote(parts.username), unquote(parts.password or "")


def _refused(parts: SplitResult, target: str, why: str, *, lasting: bool = True) -> ApiError:
    proxy = without_userinfo(parts.geturl())
    return ApiError(
        f"the proxy {proxy} did not open a tunnel to {target}: {printable(why, 200)}",
        hint="check the kubeconfig's proxy-url, and that the proxy lets you reach the API server",
        lasting=lasting,
    )


def _connect_tunnel(sock: socket.socket, parts: SplitResult, host: str, port: int, headers: dict[str, str]) -> None:
    """HTTP CONNECT (RFC 9110 section 9.3.6) with the Configuration's proxy headers; anything but a 2xx answer is
    a refusal (lasting when it is a 4xx: the proxy's rules or credentials)."""
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}", *(f"{k}: {v}" for k, v in headers.items())]
    credentials = _credentials(parts)
    if credentials is not None and not any(k.lower() == "proxy-authorization" for k in headers):
        token = base64.b64encode(":".join(credentials).encode()).decode()
        lines.append(f"Proxy-Authorization: Basic {token}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(4096)
        if not data or len(head) + len(data) > MAX_PROXY_ANSWER:
            raise _refused(parts, target, "no complete answer to CONNECT")
        head += data
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    fields = status_line.split(" ", 2)
    code = fields[1] if len(fields) >= 2 and fields[0].startswith("HTTP/1.") else ""
    if not code.startswith("2"):  # a 5xx may pass (the proxy's own upstream); anything else stays
        raise _refused(parts, target, f"it answered {status_line!r}", lasting=not code.startswith("5"))


def _socks5(sock: socket.socket, parts: SplitResult, host: str, port: int) -> None:
    """RFC 1928 CONNECT; socks5h sends the host name, socks5 the address resolved here."""
    target = f"{host}:{port}"
    credentials = _credentials(parts)
    sock.sendall(b"\x05\x01\x02" if credentials else b"\x05\x01\x00")
    reply = _exactly(sock, 2, parts, target)
    if reply[0] != 5 or reply[1] not in (0, 2) or (reply[1] == 2 and credentials is None):
        raise _refused(parts, target, "it accepts none of the offered authentication methods")
    if reply[1] == 2 and credentials is not None:  # RFC 1929
        user, password = (value.encode() for value in credentials)
        sock.sendall(bytes((1, len(user))) + user + bytes((len(password),)) + password)
        if _exactly(sock, 2, parts, target)[1] != 0:
            raise _refused(parts, target, "it refused the user name and password of the proxy-url")
    sock.sendall(b"\x05\x01\x00" + _socks_address(host, remote=parts.scheme == "socks5h") + port.to_bytes(2, "big"))
    answer = _exactly(sock, 4, parts, target)
    if answer[1] != 0:
        raise _refused(parts, target, f"SOCKS reply {answer[1]} ({SOCKS_REPLIES.get(answer[1], 'unknown')})")
    length = {1: 4, 4: 16}.get(answer[3]) or _exactly(sock, 1, parts, target)[0]
    _exactly(sock, length + 2, parts, target)  # the proxy's bound address and port


SOCKS_REPLIES = {
    1: "general failure",
    2: "not allowed by the proxy's rules",
    3: "network unreachable",
    4: "host unreachable",
    5: "connection refused",
    6: "TTL expired",
    7: "command not supported",
    8: "address type not supported",
}


def _socks_address(host: str, *, remote: bool) -> bytes:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if remote:
            name = host.encode("idna")
            return b"\x03" + bytes((len(name),)) + name
        address = ipaddress.ip_address(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    return (b"\x01" if address.version == 4 else b"\x04") + address.packed


def _exactly(sock: socket.socket, size: int, parts: SplitResult, target: str) -> bytes:
    data = b""
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            raise _refused(parts, target, "it closed the connection during the SOCKS handshake")
        data += more
    return data
