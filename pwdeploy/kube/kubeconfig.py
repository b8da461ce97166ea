"""Finding the cluster the way kubectl does: --kubeconfig, then $KUBECONFIG, then ~/.kube/config, then the
in-cluster service account; --context picks a context, whose namespace is the default one.

A kubeconfig is input: one that is missing, not YAML (the file and line YAML names) or not usable is a ConfigError
(exit 2) naming the file. Secrets in it never reach output: a bearer token loses the surrounding whitespace YAML
block scalars add (``token: |``) and one with a space or line break inside is refused without being shown; a
server URL's ``user:password@`` is dropped (the client never sent it) and never shown."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pwdeploy.errors import ClusterError, ConfigError
from pwdeploy.kube.answers import without_userinfo
from pwdeploy.kube.api import GET_CREDENTIALS, Clock, Kube, RetryPolicy, SystemClock

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def kubeconfig_location(kubeconfig: Path | None) -> str | None:
    """The kubeconfig path(s) to load, or None when there is none (then only in-cluster config can work)."""
    if kubeconfig is not None:
        if not kubeconfig.expanduser().is_file():
            raise ConfigError("--kubeconfig", f"{kubeconfig} does not exist or is not a file")
        return str(kubeconfig.expanduser())
    from_env = os.environ.get("KUBECONFIG", "")
    if from_env.strip():
        if not any(Path(p).expanduser().is_file() for p in from_env.split(os.pathsep) if p):
            raise ConfigError(None, f"KUBECONFIG={from_env} names no existing file", hint=GET_CREDENTIALS)
        return from_env
    default = Path("~/.kube/config").expanduser()
    return str(default) if default.is_file() else None


def load_kube(
    kubeconfig: Path | None = None,
    context: str | None = None,
    *,
    clock: Clock | None = None,
    retry: RetryPolicy | None = None,
) -> Kube:
    """A ``Kube`` for the chosen kubeconfig context, or the in-cluster identity when there is no kubeconfig."""
    from kubernetes import client

    location = kubeconfig_location(kubeconfig)
    configuration = client.Configuration()
    if location is not None:
        context, namespace = _load_kubeconfig(location, context, configuration, flag_given=kubeconfig is not None)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        if context is not None:
            raise ConfigError("--context", f"{context!r} needs a kubeconfig, and none was found")
        namespace = _load_in_cluster(configuration)
    else:
        raise ConfigError(
            None,
            f"no kubeconfig found: $KUBECONFIG is unset, {Path('~/.kube/config').expanduser()} does not exist, and "
            "this is not a pod with a service account",
            hint=f"fetch credentials ({GET_CREDENTIALS}) or pass --kubeconfig PATH",
        )
    configuration.retries = False  # Kube.request owns retries (with backoff); urllib3's own would double them
    # Readiness checks send up to 16 requests at once; the client's default pool (5 per CPU) would drop connections.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, 16)
    return Kube(
        client.ApiClient(configuration),
        context=context,
        namespace=namespace,
        clock=clock or SystemClock(),
        retry=retry or RetryPolicy(),
    )


def _load_kubeconfig(location: str, context: str | None, configuration: Any, *, flag_given: bool) -> tuple[str, str]:
    from kubernetes import config

    field = "--kubeconfig" if flag_given else None
    source = None if flag_given else ("KUBECONFIG" if os.environ.get("KUBECONFIG", "").strip() else None)
    try:
        contexts, active = config.list_kube_config_contexts(config_file=location)  # type: ignore[no-untyped-call]
    except Exception as exc:  # the client reads whatever the file holds: every failure is a bad kubeconfig
        raise ConfigError(field, f"cannot read kubeconfig {_where(exc, location)}", source=source) from None
    names = [str(c.get("name")) for c in contexts or [] if isinstance(c, dict)]
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else active
    if context is not None and chosen is None:
        raise ConfigError("--context", f"{context!r} is not a context in {location}; available: {', '.join(names)}")
    if not chosen:
        raise ConfigError("--context", f"{location} sets no current-context; pass one of: {', '.join(names)}")
    name = str(chosen["name"])
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=location, context=name, client_configuration=configuration, persist_config=False
        )
    except Exception as exc:  # as above; the message names the context, never a value from the user entry
        raise ConfigError(
            field, f"cannot use context {name!r} of {location}: {_reason(exc)}", hint=GET_CREDENTIALS, source=source
        ) from None
    user = str((chosen.get("context") or {}).get("user") or "")
    _clean_credentials(configuration, f"{location}: user {user!r} (context {name!r})")
    namespace = (chosen.get("context") or {}).get("namespace") or "default"
    return name, str(namespace)


def _where(exc: Exception, location: str) -> str:
    """``FILE: line 4, column 3: <what YAML says>``, or ``FILE: <why it is not a kubeconfig>``."""
    import yaml

    mark = getattr(exc, "problem_mark", None)
    if isinstance(exc, yaml.MarkedYAMLError) and mark is not None:
        file = mark.name if mark.name and not mark.name.startswith("<") else location
        return f"{file}: line {mark.line + 1}, column {mark.column + 1}: {exc.problem or exc.context}"
    return f"{location}: {_reason(exc)}"


def _reason(exc: Exception) -> str:
    from kubernetes.config.config_exception import ConfigException

    if isinstance(exc, (ConfigException, OSError)):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    # TypeError, KeyError, ... from indexing into the wrong YAML shape; their text may quote values from the file
    return "it is not a kubeconfig (a YAML mapping with clusters, contexts and users, each a mapping)"


def _clean_credentials(configuration: Any, whose: str) -> None:
    """Drop the server URL's userinfo and check the bearer token now and whenever the client refreshes it."""
    configuration.host = without_userinfo(str(configuration.host))
    refresh = configuration.refresh_api_key_hook

    def refreshed(conf: Any) -> None:
        if refresh is not None:
            refresh(conf)  # the client's hook sets the raw token again, and itself as the hook
            conf.refresh_api_key_hook = refreshed
        _clean_token(conf, whose)

    configuration.refresh_api_key_hook = refreshed
    _clean_token(configuration, whose)


def _clean_token(configuration: Any, whose: str) -> None:
    value = configuration.api_key.get("BearerToken")
    if not value:
        return
    scheme, _, token = str(value).partition(" ")
    token = token.strip()  # a token file's trailing newline, YAML's `token: |`
    if not token or any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(
            None,
            f"{whose}: the token is empty or has a space or line break inside it (a bearer token is one word)",
            hint=f"fetch fresh credentials ({GET_CREDENTIALS})",
        )
    configuration.api_key["BearerToken"] = f"{scheme} {token}"


def _load_in_cluster(configuration: Any) -> str:
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except ConfigException as exc:
        raise ClusterError(f"cannot use the in-cluster service account: {exc}") from None
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or "default"
    except OSError:
        return "default"
