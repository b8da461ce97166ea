"""The local folders a run creates (``local.compile_cache``, ``local.hlo_dir``, the ``.pwdeploy/`` stand-ins for
checkpoints and profiles), checked before any of them is made: a path under a file, a ``.pwdeploy`` that is a
file, a place nothing can be created in (``/proc``, a read-only mount) is a field error naming the field, its flag
and the path, and nothing is created."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from pwdeploy.errors import ConfigError, LocalRunError, raise_all

STATE_DIR = ".pwdeploy"
# The field (and its flag) each kind of folder comes from; checkpoints and profiles are stand-ins for GCS.
FOLDER_FIELDS = {
    "compile cache": ("local.compile_cache", "--compile-cache"),
    "HLO dumps": ("local.hlo_dir", "--local-hlo-dir"),
    "checkpoints": ("storage.checkpoints", None),
    "profiles": ("storage.profiles", None),
}


def folder_problem(path: Path) -> str | None:
    """Why pwdeploy could not create (or write in) the folder ``path``, or None. Probed by making and removing a
    folder in the nearest existing one, since permissions alone do not tell (root, read-only mounts, /proc)."""
    existing = path
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    where = "" if existing == path else f" (in the way of {path})"
    if not existing.is_dir():
        what = "a file" if existing.is_file() else "not a folder"
        return f"{existing} is {what}{where}"
    try:
        probe = tempfile.mkdtemp(prefix=".pwdeploy-probe-", dir=existing)
    except OSError as exc:
        return f"{existing} does not let pwdeploy create folders{where}: {exc.strerror or exc}"
    os.rmdir(probe)
    return None


def check_folders(folders: Iterable[tuple[str, Path]]) -> None:
    """Every problem of the (kind, path) folders a run would create, as field errors; nothing when all can be."""
    errors = []
    for kind, path in folders:
        problem = folder_problem(path)
        if problem is None:
            continue
        field, flag = FOLDER_FIELDS[kind]
        fix = f"pass {flag} DIR naming a folder you can write" if flag else "move or remove what is in the way"
        if any(part.name == STATE_DIR and part.is_file() for part in (path, *path.parents)):
            fix += f"; {STATE_DIR} beside the config holds pwdeploy's local state and must be a folder"
        errors.append(ConfigError(field, f"the local {kind} folder cannot be made: {problem}", hint=fix))
    raise_all(errors)


def lock_file(checkpoints: Path) -> Path:
    """The lock a local run holds on its checkpoint folder: beside it, so that a mount point there is untouched."""
    return checkpoints.parent / f".{checkpoints.name}.lock"


@contextlib.contextmanager
def checkpoints_locked(checkpoints: Path) -> Iterator[None]:
    """Hold the checkpoint folder for one local run: another run of the same job (the same folder) is refused,
    naming this one's pid, rather than clearing or overwriting its checkpoints mid-training. An advisory
    ``flock`` on a file beside the folder, released by the kernel however this process ends (``kill -9``
    included): a lock is never left behind. Where ``fcntl`` does not exist, nothing is locked."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    path = lock_file(checkpoints)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_lock(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            who = f"pid {holder}" if holder.isdigit() else "a process that has not written its pid yet"
            raise LocalRunError(
                f"another local run ({who}) is using the checkpoint folder {checkpoints}: this run would clear or "
                "overwrite its checkpoints mid-training",
                hint="wait for that run to end (or stop it), or run this one from a copy of the config in another "
                f"folder: the checkpoints go to .pwdeploy/checkpoints beside the config (lock: {path})",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # the lock goes with the descriptor


def _open_lock(path: Path) -> int:
    """The lock file, opened for reading and writing (made if missing): a file of its own and nothing else. A
    link there (symbolic or hard) would have pwdeploy truncate what it points at, a FIFO or a device would be
    opened as one; each is refused, naming the path. Not inherited by the job (Python's fds are CLOEXEC)."""
    import stat

    refuse = f"{path} is not pwdeploy's lock file"
    hint = f"remove it (rm {path}): pwdeploy makes its own; it holds one line, the pid of the run using the folder"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        kind = "a symbolic link" if os.path.islink(path) else "not a file pwdeploy can open"
        raise LocalRunError(f"{refuse}: it is {kind} ({exc.strerror or exc})", hint=hint) from None
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
        os.close(fd)
        kind = "a hard link to another file" if stat.S_ISREG(found.st_mode) else "not a regular file"
        raise LocalRunError(f"{refuse}: it is {kind}", hint=hint)
    return fd


def check_clearable(checkpoints: Path) -> None:
    """ConfigError when the checkpoint folder is a mount point with files in it (see ``clear_checkpoints``)."""
    if checkpoints.is_dir() and os.path.ismount(checkpoints) and any(checkpoints.iterdir()):
        raise ConfigError(
            "storage.checkpoints",
            f"the local checkpoint folder {checkpoints} is a mount point with files in it: a local run starts "
            "with an empty one, and pwdeploy does not empty a mounted folder",
            hint="pass --resume to keep (and resume from) what is there, or empty it yourself",
        )


def clear_checkpoints(checkpoints: Path) -> bool:
    """Empty the checkpoint folder an earlier run left, for a run that starts from step 0; whether there was
    anything to clear. A folder that is a mount point (a bucket mounted there, another disk) is not emptied: it is
    a field error saying to pass --resume or empty it yourself; emptying it would delete what the mount holds."""
    check_clearable(checkpoints)
    if not checkpoints.is_dir() or not any(checkpoints.iterdir()):
        return False
    import shutil

    for entry in checkpoints.iterdir():  # the entries, not the folder: it stays what it is (its mode, a link)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return True
