"""A wheel of the running pwdeploy, built in memory, for job images whose code imports ``pwdeploy.runtime``.

Built from the package's own files rather than with a build tool: that works for an editable checkout and an
installed wheel alike, needs no network or build backend, and gives the same bytes for the same files (fixed
times, stored not deflated), so the job image's inputs hash is the same on every machine.
"""

from __future__ import annotations

from pathlib import Path

import pwdeploy
from pwdeploy import __version__

_SKIPPED_DIRS = frozenset({"__pycache__"})
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


def build_wheel(version: str = __version__, package_dir: Path | None = None) -> bytes:
    """The wheel's bytes: every file of the package (caches left out) plus METADATA, WHEEL and RECORD.

    ``version``: the version its name and METADATA give, default the package's."""
    import io
    import zipfile

    root = package_dir or Path(pwdeploy.__file__).parent
    members = [(f"pwdeploy/{path.relative_to(root).as_posix()}", path.read_bytes()) for path in _package_files(root)]
    info = f"pwdeploy-{version}.dist-info"
    members.append((f"{info}/METADATA", f"Metadata-Version: 2.1\nName: pwdeploy\nVersion: {version}\n".encode()))
    wheel = "Wheel-Version: 1.0\nGenerator: pwdeploy\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    members.append((f"{info}/WHEEL", wheel.encode()))
    record = "".join(f"{name},sha256={_digest(data)},{len(data)}\n" for name, data in members)
    members.append((f"{info}/RECORD", (record + f"{info}/RECORD,,\n").encode()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in members:
            entry = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, data)
    return out.getvalue()


def _package_files(root: Path) -> list[Path]:
    found = [
        path
        for path in root.rglob("*")
        if path.is_file()
        and not _SKIPPED_DIRS.intersection(path.relative_to(root).parts)
        and not path.name.endswith(_SKIPPED_SUFFIXES)
    ]
    return sorted(found, key=lambda path: path.relative_to(root).as_posix())


def _digest(data: bytes) -> str:
    import base64
    import hashlib

    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
