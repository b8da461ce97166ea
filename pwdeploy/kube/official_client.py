"""pwdeploy's client from the official one: a configured ``kubernetes.client.ApiClient`` (what a notebook that
ran ``kubernetes.config.load_kube_config()`` holds) becomes a ``Kube`` that talks to the same API server with the
same credentials and the same TLS settings, through pwdeploy's own bounded client (``http_client``).

Nothing of the official client is imported: its configuration is read by the attribute names it has had since
its first releases (``host``, ``api_key`` and ``api_key_prefix`` under ``BearerToken`` or ``authorization``,
``refresh_api_key_hook``, ``verify_ssl``, ``ssl_ca_cert``, ``ca_cert_data``, ``cert_file``, ``key_file``,
``assert_hostname``, ``tls_server_name``, ``proxy``, ``proxy_headers``, ``no_proxy``), as its ``rest.py`` and
``auth_settings`` read them (kubernetes-client/python 37.0.0, kubernetes/client/configuration.py). A token the
official client refreshes (an exec plugin's, through its ``refresh_api_key_hook``) is asked of it again before
each request, as the official client asks. Credentials go to an https:// server only, as ``load_kube`` sends
them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pwdeploy.errors import ArgumentError
from pwdeploy.kube.answers import without_userinfo
from pwdeploy.kube.http_client import ApiClient, Configuration
from pwdeploy.kube.reach import plain_http
from pwdeploy.kube.seam import Clock, Kube, RequestLimits, RetryPolicy, SystemClock
from pwdeploy.kube.throttle import Limit, Throttle, limit_from

WHOSE = "the kubernetes client's configuration"


def kube_from_official(
    client: Any,
    namespace: str,
    *,
    clock: Clock | None = None,
    request_limits: RequestLimits | None = None,
    on_notice: Callable[[str], None] | None = None,
    rate: Limit | None = None,
) -> Kube:
    """A ``Kube`` for the server and credentials of ``client`` (a ``kubernetes.client.ApiClient``, or its
    ``Configuration``), working in ``namespace``, bounded and rate-limited as ``load_kube``'s (``rate``: None, the
    environment's, else the default); anything else is an ``ArgumentError`` naming ``client``."""
    from pwdeploy.kube.kubeconfig import clean_credentials

    official = getattr(client, "configuration", client)
    if not callable(getattr(official, "auth_settings", None)) or not isinstance(getattr(official, "host", None), str):
        raise ArgumentError(
            "client",
            f"must be a kubernetes.client.ApiClient (or its Configuration), not a {type(client).__name__}",
            hint="client = kubernetes.config.new_client_from_config()",
        )
    configuration = configuration_of(official, on_notice)
    clean_credentials(configuration, WHOSE)
    limits, clock = request_limits or RequestLimits(), clock or SystemClock()
    return Kube(
        ApiClient(configuration),
        context=None,
        namespace=namespace,
        clock=clock,
        retry=RetryPolicy(),
        timeout=limits.timeout,
        deadline=limits.deadline,
        slow_after=limits.slow_after,
        on_wait=on_notice,
        throttle=Throttle(rate or limit_from(), clock),
    )


def configuration_of(official: Any, on_notice: Callable[[str], None] | None = None) -> Configuration:
    """pwdeploy's ``Configuration`` with the official one's server, TLS settings, proxy and credentials."""
    ours = Configuration()
    host = str(official.host).rstrip("/")
    if not host.startswith(("https://", "http://")):
        raise ArgumentError("client", f"its host {without_userinfo(host)!r} is not an http(s):// URL")
    ours.host = host
    ours.verify_ssl = bool(official.verify_ssl)
    for name in ("ssl_ca_cert", "ca_cert_data", "cert_file", "key_file", "assert_hostname", "tls_server_name"):
        setattr(ours, name, getattr(official, name, None))
    ours.proxy = getattr(official, "proxy", None) or None
    ours.proxy_headers = getattr(official, "proxy_headers", None)
    ours.no_proxy = getattr(official, "no_proxy", None)
    if plain_http(host):
        if (_bearer(official) or ours.cert_file) and on_notice is not None:
            on_notice(
                f"pwdeploy: {without_userinfo(host)} is plain http, so the credentials of {WHOSE} are not sent "
                "(as kubectl sends none); use the server's https:// URL"
            )
        ours.cert_file = ours.key_file = None
        return ours
    token = _bearer(official)
    if token:
        ours.api_key["BearerToken"] = token

        def refreshed(conf: Configuration) -> None:  # the official client's refresh, asked as it asks it
            conf.api_key["BearerToken"] = _bearer(official) or ""

        ours.refresh_api_key_hook = refreshed
    return ours


def _bearer(official: Any) -> str | None:
    """The Authorization header the official client sends (its ``auth_settings``): ``api_key`` under
    ``BearerToken`` or ``authorization``, with its prefix, after its refresh hook ran."""
    hook = getattr(official, "refresh_api_key_hook", None)
    if hook is not None:
        hook(official)
    keys, prefixes = getattr(official, "api_key", None) or {}, getattr(official, "api_key_prefix", None) or {}
    name = "BearerToken" if keys.get("BearerToken") else "authorization"
    value = keys.get(name)
    if not value:
        return None
    prefix = prefixes.get(name)
    return f"{prefix} {value}" if prefix else str(value)
