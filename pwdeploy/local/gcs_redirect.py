"""A local run never writes to production storage: every ``gs://`` the job names (its command and arguments,
``main.env``, the config files its command names) goes to a local GCS emulator whose objects are files in
``.pwdeploy/gcs/BUCKET/`` beside the config, and the job gets no Google credentials while it runs.

Each client a JAX program writes ``gs://`` with is pointed at the emulator by its own hook, each proved with a real
process against this emulator (``tests/test_local_gcs_redirect.py``):

- google-cloud-storage (MaxText's gcs_utils, TensorBoard writers) and gcsfs (etils.epath's ``gs://``, which Orbax
  uses for its directories, and JAX's compilation cache): ``STORAGE_EMULATOR_HOST``; gcsfs also needs its
  zonal-bucket lookup off (``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``: it is gRPC, which the emulator does not
  speak) and anonymous credentials (``FSSPEC_GS_TOKEN=anon``);
- tensorstore (Orbax's array data): ``TENSORSTORE_GCS_HTTP_URL`` (google/tensorstore docs/environment.rst), with
  ``GOOGLE_AUTH_TOKEN_FOR_TESTING`` so that it sends a fixed token instead of the user's credentials
  (tensorstore's ``google_auth_provider``: that variable is the first source it reads, as its own GCS test bench
  sets it);
- etils.epath with TensorFlow installed (MaxText's environment) takes ``tf.io.gfile`` for ``gs://``, whose GCS
  client has no emulator hook (its endpoint, www.googleapis.com, is built into TensorFlow): ``EPATH_USE_TF=false``
  (etils ``epath/gpath.py``, ``_epath_use_tf``) makes it use gcsfs, which goes to the emulator (measured: MaxText's
  checkpoint folder was made through TensorFlow's client, which tried www.googleapis.com, until this was set). The
  probe on the job's PYTHONPATH keeps tf.io.gfile's folder semantics there (``PWDEPLOY_LOCAL_GCS``: a folder
  epath made exists), which gcsfs lacks (``pwdeploy/local/transfer_probe``).

A client without such a hook (TensorFlow's ``tf.io.gfile``, a ``gsutil`` or ``gcloud storage`` subprocess) would
reach Google: the job's credentials are withheld (no ``GOOGLE_APPLICATION_CREDENTIALS``, an empty
``CLOUDSDK_CONFIG`` in place of gcloud's application-default credentials, no metadata server: ``NO_GCE_CHECK``
and ``GCE_METADATA_HOST`` for google-auth, ``GCE_METADATA_ROOT`` for tensorstore), so it fails instead of writing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from pwdeploy.config import JobConfig
from pwdeploy.errors import LocalRunError

Say = Callable[[str], None]
FOLDER = "gcs"  # under .pwdeploy/ beside the config
URI = re.compile(r"gs://([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])(/[^\s\"',;)}\]]*)?")
CONFIG_SUFFIXES = (".yml", ".yaml", ".json")
MAX_CONFIG_BYTES = 1 * 2**20
START_SECONDS = 20.0
MARKER = "PWDEPLOY_LOCAL_GCS"  # tells the job's probe that its gs:// is on the emulator
TOKEN = "pwdeploy-local-run"  # what tensorstore sends the emulator instead of the user's credentials
CLIENT_ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "FSSPEC_GS_TOKEN": "anon", "EPATH_USE_TF": "false"}
NO_METADATA = "127.0.0.1:9"  # nothing listens there: a metadata lookup is refused at once
WITHHELD = ("GOOGLE_APPLICATION_CREDENTIALS",)  # set empty: read as unset by google-auth


class Named(NamedTuple):
    """A gs:// location the job names, and where it names it."""

    uri: str
    bucket: str
    where: str  # "main.command", "main.env.OUT", "configs/base.yml"


def named_locations(job: JobConfig, command: Sequence[str], cwd: Path) -> list[Named]:
    """Every gs:// location in the command's words, main.env's values and the config files the command names."""
    found: list[Named] = []
    for word in command:
        found += _in_text(word, "main.command")
    for name, value in job.main.env:
        found += _in_text(value, f"main.env.{name}")
    for word in command[1:]:
        name = word.partition("=")[2] if "=" in word else word  # --config=base.yml, as absl and argparse take it
        path = cwd / name
        if name.lower().endswith(CONFIG_SUFFIXES) and path.is_file() and path.stat().st_size <= MAX_CONFIG_BYTES:
            text = path.read_text(encoding="utf-8", errors="replace")
            found += _in_text(text if name.lower().endswith(".json") else without_comments(text), name)
    return list(dict.fromkeys(found))


def without_comments(text: str) -> str:
    """A YAML file's text without its comments (a ``#`` at the start of a line or after a space, outside quotes):
    the examples a config's comments give (MaxText's ``# e.g. gs://my-maxtext-outputs/``) name no bucket the job
    uses."""
    lines = []
    for line in text.splitlines():
        quote = ""
        for index, char in enumerate(line):
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char == "#" and (index == 0 or line[index - 1].isspace()):
                line = line[:index]
                break
        lines.append(line)
    return "\n".join(lines)


def _in_text(text: str, where: str) -> list[Named]:
    return [Named(match.group(0), match.group(1), where) for match in URI.finditer(text)]


class Redirect(NamedTuple):
    """The emulator a run's gs:// goes to: its address, the folder of its files, the buckets it holds."""

    url: str
    folder: Path
    buckets: tuple[str, ...]

    def env(self, home: Path) -> dict[str, str]:
        """What points the job's GCS clients at the emulator and withholds its credentials (``home``: an empty
        folder for CLOUDSDK_CONFIG)."""
        hooks = {"STORAGE_EMULATOR_HOST": self.url, "TENSORSTORE_GCS_HTTP_URL": self.url, MARKER: "1"}
        fence = {"CLOUDSDK_CONFIG": str(home), "NO_GCE_CHECK": "true", "GOOGLE_AUTH_TOKEN_FOR_TESTING": TOKEN}
        fence |= {"GCE_METADATA_HOST": NO_METADATA, "GCE_METADATA_ROOT": NO_METADATA}
        return {**hooks, **CLIENT_ENV, **fence, **dict.fromkeys(WITHHELD, "")}


def emulator_available() -> bool:
    from importlib.util import find_spec

    return find_spec("gcp_storage_emulator") is not None


@contextmanager
def redirected(
    named: list[Named], buckets: Sequence[str], folder: Path, *, fresh: bool, say: Say
) -> Iterator[dict[str, str]]:
    """The job's environment additions while the emulator runs (none when the job names no gs://); the lines say
    what goes where. ``buckets``: further buckets to make (a gs:// compile cache's). ``fresh``: an earlier run's
    objects are cleared first (--resume keeps them)."""
    if not named:
        yield {}
        return
    if not emulator_available():
        raise LocalRunError(
            f"the job names {named[0].uri} ({named[0].where}), and a local run never writes to production storage: "
            "it sends gs:// to a local GCS emulator, which is not installed",
            hint="pip install gcp-storage-emulator (it comes with pwdeploy), or give the job local paths after --",
        )
    cleared = fresh and _clear(folder)
    all_buckets = tuple(dict.fromkeys([*(n.bucket for n in named), *buckets]))
    with _emulator(folder, all_buckets) as url, tempfile.TemporaryDirectory(prefix="pwdeploy-no-gcloud-") as home:
        redirect = Redirect(url, folder, all_buckets)
        for line in lines(redirect, named, cleared=cleared):
            say(line)
        yield redirect.env(Path(home))


def lines(redirect: Redirect, named: list[Named], *, cleared: bool) -> list[str]:
    """One line per bucket (what named it, where its objects go), and one for the credentials withheld."""
    out = []
    earlier = "; an earlier run's objects were cleared (--resume keeps them)" if cleared else ""
    for bucket in redirect.buckets:
        mine = [n for n in named if n.bucket == bucket]
        said = ", ".join(dict.fromkeys(f"{n.uri} in {n.where}" for n in mine)) or "the compile cache"
        out.append(
            f"pwdeploy local: gs://{bucket} ({said}) goes to a local GCS emulator ({redirect.url}): its objects are "
            f"files in {redirect.folder / bucket}{earlier}"
        )
        earlier = ""
    out.append(
        "pwdeploy local: the job's Google credentials are withheld while it runs, so a client that ignores "
        "STORAGE_EMULATOR_HOST and TENSORSTORE_GCS_HTTP_URL fails instead of reaching production storage"
    )
    return out


def _clear(folder: Path) -> bool:
    """Empty the emulator's folder (a run starts from empty buckets, as from no checkpoints); whether it held
    anything."""
    if not folder.is_dir() or not any(folder.iterdir()):
        return False
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    return True


@contextmanager
def _emulator(folder: Path, buckets: Sequence[str]) -> Iterator[str]:
    """Start the emulator over ``folder`` with ``buckets``; its URL while the block runs; stopped after (its
    standard input closes: it also stops so when pwdeploy dies)."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder.parent / "gcs-emulator.log"
    with open(log, "wb") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "pwdeploy.local.gcs_emulator", str(folder), *buckets],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            start_new_session=True,  # Ctrl-C in the terminal is the job's to handle, not the emulator's
            env={**os.environ, "PYTHONPATH": _package_root()},
        )
    try:
        yield f"http://127.0.0.1:{_port(process, log)}"
    finally:
        _stop(process)


def _package_root() -> str:
    """The folder that holds this pwdeploy, first on the emulator's PYTHONPATH (an editable install is found
    either way; a copy run from a checkout is found so too)."""
    root = str(Path(__file__).resolve().parents[2])
    inherited = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (root, inherited) if p)


def _port(process: subprocess.Popen[bytes], log: Path) -> int:
    import select

    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], START_SECONDS)
    line = process.stdout.readline() if ready else b""
    if not line.strip().isdigit():
        _stop(process)
        tail = log.read_text(encoding="utf-8", errors="replace")[-2000:].strip()
        raise LocalRunError(
            f"the local GCS emulator did not start within {START_SECONDS:.0f} s: {tail or 'no output'}",
            hint=f"see {log}; or give the job local paths after --",
        )
    return int(line)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)
    if process.stdout is not None:
        process.stdout.close()
