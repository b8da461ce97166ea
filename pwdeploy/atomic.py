"""Replace a file in one step, so a reader (or a crash) never sees it half-written."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``.

    Not mkstemp: its files are private (0600), and what pwdeploy writes (manifests, the sidecar lock, caches) is
    shared like the config beside it. A new file gets the mode any new file gets here (0644 under the usual umask);
    a rewritten one keeps its mode.
    """
    tmp = path.with_name(f".{path.name}.{os.urandom(6).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with contextlib.suppress(FileNotFoundError):  # a new file keeps the default mode
            os.fchmod(fd, stat.S_IMODE(path.stat().st_mode))
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
