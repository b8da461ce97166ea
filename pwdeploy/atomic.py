"""Replace a file in one step, so a reader (or a crash) never sees it half-written."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """``write_bytes_atomic`` of ``text`` in UTF-8."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``.

    Not mkstemp: its files are private (0600), and what pwdeploy writes (manifests, the sidecar lock, caches) is
    shared like the config beside it. A new file gets the mode any new file gets here (0644 under the usual umask);
    a rewritten one keeps its mode.
    """
    tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with contextlib.suppress(FileNotFoundError):  # a new file keeps the default mode
            os.fchmod(fd, stat.S_IMODE(path.stat().st_mode))
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
