"""Acting as another identity, as kubectl does: a kubeconfig user's ``as`` (user name), ``as-uid``, ``as-groups``
and ``as-user-extra`` become the ``Impersonate-User``, ``Impersonate-Uid``, ``Impersonate-Group`` (one header per
group) and ``Impersonate-Extra-KEY`` (one header per value) headers of every request and stream.

The names, the rules and the key escaping are client-go's: tools/clientcmd/api/v1/types.go (the kubeconfig
fields), tools/clientcmd/validation.go (``requesting uid, groups or user-extra for USER without impersonating a
user``), transport/round_trippers.go (the header names; an extra key's bytes outside an HTTP token, and ``%``,
are sent as ``%XX``) in kubernetes/client-go (master); tests compare the
headers with kubectl's, sent to the same stub. The API server reads each group and each extra value from its
own header line, so they are never joined with commas."""

from __future__ import annotations

from typing import Any

from pwdeploy.errors import ConfigError

USER, UID, GROUP, EXTRA = "Impersonate-User", "Impersonate-Uid", "Impersonate-Group", "Impersonate-Extra-"
# RFC 7230 tchar, less "%" (the escape itself): client-go's legalHeaderKeyBytes.
_TOKEN = frozenset(b"!#$&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")

Headers = tuple[tuple[str, str], ...]


def impersonation_headers(user: dict[str, Any], whose: str) -> Headers:
    """The impersonation headers a kubeconfig user entry asks for (() when none); a field of the wrong type, or a
    uid, group or extra without ``as``, is a ``ConfigError`` naming the field (kubectl refuses both)."""
    name = _text(user, "as", whose)
    uid = _text(user, "as-uid", whose)
    groups = _texts(user.get("as-groups"), f"{whose}: as-groups")
    extra = user.get("as-user-extra") or {}
    if not isinstance(extra, dict) or not all(isinstance(k, str) and k for k in extra):
        raise ConfigError(None, f"{whose}: as-user-extra is not a map of names to lists of strings", hint=_HINT)
    if not name and (uid or groups or extra):
        raise ConfigError(
            None,
            f"{whose}: requesting uid, groups or user-extra without impersonating a user (as: is empty)",
            hint="add `as: USER` to the kubeconfig user, or remove as-uid, as-groups and as-user-extra",
        )
    if not name:
        return ()
    headers = [(USER, name)] + ([(UID, uid)] if uid else []) + [(GROUP, g) for g in groups]
    for key, values in extra.items():
        headers += [(EXTRA + escape_key(key), v) for v in _texts(values, f"{whose}: as-user-extra.{key}")]
    for header, value in headers:
        if any(c in value for c in "\r\n\0"):
            raise ConfigError(None, f"{whose}: the value for {header} has a line break or NUL in it", hint=_HINT)
    return tuple(headers)


_HINT = "fix the user entry's impersonation fields (as, as-uid, as-groups, as-user-extra) in the kubeconfig"


def escape_key(key: str) -> str:
    """An extra's key as a header name holds it: bytes outside an HTTP token (and ``%``) as ``%XX``."""
    return "".join(chr(b) if b in _TOKEN else f"%{b:02X}" for b in key.encode("utf-8"))


def _text(user: dict[str, Any], field: str, whose: str) -> str:
    value = user.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(None, f"{whose}: {field} is not a string", hint=_HINT)
    return value


def _texts(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(None, f"{where} is not a list of strings", hint=_HINT)
    return value
