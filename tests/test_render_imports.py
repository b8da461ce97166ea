"""What `pwdeploy render` imports, as lists of modules rather than times: render is the command users wait on, and
every module it loads is start-up it pays (docs/benchmarks.md). The rooms it needs are named here, so a module of
another room (a `check` rule, the image engine, the Kubernetes client) that comes onto render's path fails this
test, whoever adds it; a new module inside a room render needs (a config field's, a manifest builder's) does not.
The standard library modules beyond what `import click, yaml` loads are listed one by one."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pwdeploy.config import load_job
from pwdeploy.images import job_image, lock
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"

# The rooms of pwdeploy render needs (each whole: what its modules import is theirs to decide), and the CLI's
# modules one by one (the other commands' modules must stay off render's path).
RENDER_ROOMS = frozenset(
    {
        "config",
        "manifests",
        "validation",
        "catalog",
        "quantity",
        "envcontract",
        "advice",
        "errors",
        "identifiers",
        "names",
        "imageref",
        "releases",  # the default images: the newest Pathways release seen for the job's JAX
        "atomic",
        "text",
    }
)
RENDER_CLI = frozenset(
    {
        "pwdeploy",
        "pwdeploy.cli",
        "pwdeploy.cli.commands",
        "pwdeploy.cli.help",
        "pwdeploy.cli.options",
        "pwdeploy.cli.seams",
    }
)
RENDER_CLI |= {"pwdeploy.cli.render"}
# The library's face, which render calls as every command does: its package (the table of names) and the job's
# functions, not the argument checks (loaded only to say what is wrong) nor the other rooms' faces.
RENDER_CLI |= {"pwdeploy.api", "pwdeploy.api.job_api"}
# A job whose image is pinned from the lock file reads the lock and hashes the job's folder: these, not the build
# (nor the sidecar's spec, when there is no sidecar image to pin).
PIN_MODULES = frozenset(
    f"pwdeploy.images{suffix}"
    for suffix in (
        "",
        ".digests",
        ".ignore",
        ".inputs",
        ".job_image",
        ".lock",
        ".pin",
        ".source_folder",
        ".template",
    )
) | {"pwdeploy.job_python"}  # the job's Python: an official base's, or what its project's requires-python allows
# The standard library beyond `import click, yaml`: a command string is split as a shell splits it; locale is
# click's (gettext's language lookup for its help strings). Not json: the schemas are read from the cache's marshal
# copies. Not difflib: click imports it for a "did you mean" list, which render's parser no longer has it build for
# `-f`. Not decimal: the example's quantities (8, 32Gi) are whole, which pwdeploy.quantity parses as ints.
# gc is built into the interpreter (no file to load): the CLI holds the cycle collector during start-up.
STDLIB_EXTRA = frozenset(
    {
        "gc",
        "shlex",
        "locale",
        "_locale",
        "encodings.ascii",
    }
)
# CPython's own sha256 (pwdeploy.images.digests.sha256), not hashlib: OpenSSL's takes 2.5 ms to import, and a pin of an
# unchanged folder hashes no file.
PIN_STDLIB = frozenset({"_sha256", "_sha2"})

MODULES = """
import contextlib, io, sys
args = sys.argv[1:]
if args:
    from pwdeploy.cli import main
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            main(args)
    except SystemExit as exc:
        if exc.code:
            raise
else:
    import click, yaml
print("\\n".join(sorted(sys.modules)))
"""


def modules(*args: str, cwd: Path = REPO) -> set[str]:
    """The modules loaded after running ``pwdeploy ARGS`` in a fresh interpreter (without args: the floor)."""
    done = subprocess.run(
        [sys.executable, "-c", MODULES, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


@pytest.fixture(scope="module", autouse=True)
def warm_schema_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A cache of its own, made by one render first: a render reads the schemas' copies there and imports no json,
    the first render on a machine parses them (and imports it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        assert "json" in modules("render", "-f", str(EXAMPLE))
        yield


@pytest.fixture(scope="module")
def floor() -> set[str]:
    return modules()


def not_needed(loaded: set[str], floor: set[str], *, pinned: bool = False) -> list[str]:
    wrong = []
    for name in sorted(loaded - floor):
        parts = name.split(".")
        if parts[0] == "pwdeploy":
            needed = name in RENDER_CLI or (len(parts) > 1 and parts[1] in RENDER_ROOMS)
            needed = needed or (pinned and name in PIN_MODULES)
        else:
            needed = name in STDLIB_EXTRA or (pinned and name in PIN_STDLIB)
        if not needed:
            wrong.append(name)
    return wrong


def test_render_imports_only_what_it_uses(floor: set[str]) -> None:
    loaded = modules("render", "-f", str(EXAMPLE))
    assert "pwdeploy.manifests" in loaded and "pwdeploy.validation.checker" in loaded  # it did render and validate
    assert not_needed(loaded, floor) == [], "render imports modules it does not use"


def test_render_without_validation_imports_no_validation(floor: set[str]) -> None:
    loaded = modules("render", "-f", str(EXAMPLE), "--no-validate")
    assert not {name for name in loaded if name.startswith("pwdeploy.validation")}
    assert not_needed(loaded, floor) == []


def test_a_pinned_render_reads_the_lock_and_builds_nothing(floor: set[str], tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    text = EXAMPLE.read_text(encoding="utf-8").replace(
        "image:\n  base:", "image:\n  repository: r.example/p/job\n  base:"
    )
    text = text.replace("  image: us-docker.pkg.dev/my-project/jobs/dp-example:0.1.0\n", "")  # main.image: pinned
    assert "dp-example:0.1.0" not in text
    job.write_text(text, encoding="utf-8")
    (tmp_path / "requirements.txt").write_text("", encoding="utf-8")
    (tmp_path / "train.py").write_text("print('training')\n", encoding="utf-8")
    loaded_job = load_job(job, {})
    found = job_image.collect(loaded_job, job)
    lock.record(
        job_image.lock_path(loaded_job), loaded_job.name, found.lock_entry("r.example/p/job", "sha256:" + "0" * 64)
    )
    first = modules("render", "-f", str(job))
    assert "json" in first  # the lock parsed: then its parsed copy is read
    loaded = modules("render", "-f", str(job))
    assert "pwdeploy.images.pin" in loaded
    assert not_needed(loaded, floor, pinned=True) == []
    assert (
        "r.example/p/job@sha256:"
        in subprocess.run(
            [sys.executable, "-m", "pwdeploy", "render", "-f", str(job)], capture_output=True, text=True, check=True
        ).stdout
    )  # pinned


def test_the_test_sees_a_module_render_does_not_need(floor: set[str]) -> None:
    """The check itself: a room render does not need, and a library, are reported."""
    loaded = {*floor, "pwdeploy.check.rules", "pwdeploy.images.engine", "tarfile", "kubernetes"}
    assert not_needed(loaded, floor) == ["kubernetes", "pwdeploy.check.rules", "pwdeploy.images.engine", "tarfile"]


COLLECTOR = """
import contextlib, gc, io, sys
from pwdeploy import manifests
from pwdeploy.cli import main
build, seen = manifests.build, []
def watched(job):
    seen.append(gc.isenabled())
    return build(job)
manifests.build = watched
for args in (sys.argv[1:], ["no-such-command"]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with contextlib.suppress(SystemExit):
            main(args)
    print(gc.isenabled(), gc.get_freeze_count() > 0)
print(seen)
"""


def test_the_collector_is_held_for_start_up_only() -> None:
    """main() turns the cycle collector off while the command's modules load and back on (start-up's objects
    frozen) before the command runs, and after a command that does not exist."""
    done = subprocess.run(
        [sys.executable, "-c", COLLECTOR, "render", "-f", str(EXAMPLE)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["True True", "True True", "[True]"]


_CLUSTER_COMMAND = """
import contextlib, io, os, sys
os.environ["KUBECONFIG"] = os.path.join(sys.argv[1], "missing-kubeconfig")
from pwdeploy.cli import main
with contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit):
    main(sys.argv[2:])
print("\\n".join(sorted(m for m in sys.modules if m.startswith("pwdeploy"))))
"""


@pytest.mark.parametrize("command", [["list"], ["status", "x"], ["logs", "x", "-f"], ["delete", "x", "-y"]])
def test_a_cluster_command_that_reads_no_job_config_does_not_import_it(tmp_path: Path, command: list[str]) -> None:
    """list, status, logs and delete take a job's name, never its config: the config (about 20 ms of imports) stays
    out of their start-up. The command runs up to reading the kubeconfig, which is missing here."""
    done = subprocess.run(
        [sys.executable, "-c", _CLUSTER_COMMAND, str(tmp_path), *command],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=True,
    )
    loaded = done.stdout.split()
    assert f"pwdeploy.cli.{'cluster'}" in loaded, loaded  # the command's module ran
    assert [m for m in loaded if m.startswith("pwdeploy.config")] == []
