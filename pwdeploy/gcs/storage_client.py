"""The seam to GCS: building a client from Application Default Credentials, and one place where the client's
exceptions become a ``GcsFailure`` with a kind the checks can reason about.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

T = TypeVar("T")

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
# (connect, read) seconds per request; a preflight must never hang on a dead endpoint.
TIMEOUT = (5.0, 15.0)
RETRY_SECONDS = 10.0
MESSAGE_CHARS = 240

ClientFactory = Callable[[], Any]  # returns a google.cloud.storage.Client
# What went wrong, as far as the checks need to tell: a missing thing, a refusal, an API the backend lacks, no
# answer, credentials that cannot be used, anything else.
FailureKind = Literal["not_found", "denied", "unsupported", "unreachable", "credentials", "error"]


class MissingCredentials(Exception):
    """No Application Default Credentials could be found."""


@dataclass(frozen=True)
class GcsFailure(Exception):
    """A GCS call that did not succeed, and what kind of failure it was."""

    kind: FailureKind
    message: str

    def __str__(self) -> str:
        return self.message


def default_client() -> Any:
    """A storage client as Google libraries build one: anonymous against an emulator, otherwise ADC."""
    from google.cloud import storage

    if os.environ.get(EMULATOR_ENV):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project="pwdeploy-preflight", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, project = google.auth.default()
    except DefaultCredentialsError as exc:
        raise MissingCredentials(str(exc).split(". ")[0].rstrip(".")) from None
    return storage.Client(project=project, credentials=credentials)


def principal(client: Any) -> str:
    """Who the checks run as, as far as the credentials say."""
    if os.environ.get(EMULATOR_ENV):
        return f"anonymous (emulator at {os.environ[EMULATOR_ENV]})"
    email = getattr(getattr(client, "_credentials", None), "service_account_email", None)
    return str(email) if email and email != "default" else "your Application Default Credentials"


def retry() -> Any:
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY.with_timeout(RETRY_SECONDS)


def call(action: Callable[[], T]) -> T:
    """Run one client call; raise ``GcsFailure`` instead of transport or API exceptions."""
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth
    from requests import exceptions as http

    try:
        return action()
    except api.NotFound as exc:
        raise GcsFailure("not_found", _short(exc)) from None
    except (api.Forbidden, api.Unauthorized) as exc:
        raise GcsFailure("denied", _short(exc)) from None
    except (api.MethodNotAllowed, api.MethodNotImplemented, api.BadRequest) as exc:
        raise GcsFailure("unsupported", _short(exc)) from None
    except auth.RefreshError as exc:
        raise GcsFailure("credentials", f"credentials could not be refreshed: {exc}") from None
    except (http.ConnectionError, http.Timeout, auth.TransportError, api.RetryError, TimeoutError) as exc:
        raise GcsFailure("unreachable", f"cannot reach GCS: {type(exc).__name__}: {_first_line(exc)}") from None
    except api.GoogleAPICallError as exc:
        raise GcsFailure("error", _short(exc)) from None


def _short(exc: Any) -> str:
    code = getattr(exc, "code", None)
    message = getattr(exc, "message", None) or _first_line(exc)
    return f"{int(code)} {message}" if code else str(message)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 3] + "..."
