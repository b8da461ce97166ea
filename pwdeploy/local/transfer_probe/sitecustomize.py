"""Counts host<->device transfers and host syncs in the job's process, per training step (`local run`).

Python imports ``sitecustomize`` at start-up from the first folder on ``sys.path`` that has one; `local run` puts
this folder first on the job's PYTHONPATH. Nothing is imported here but the standard library: when the program
imports jax, these entry points are wrapped (jax 0.10's public API and its ``ArrayImpl``):

- host to device: ``jax.device_put`` (the bytes of the leaves that are not already jax Arrays) and
  ``jax.make_array_from_callback`` (the bytes each callback returns);
- device to host: ``ArrayImpl._value``, through which ``np.asarray(x)``, ``float(x)``, ``int(x)``, ``x.item()``,
  ``x.tolist()``, formatting and ``jax.device_get`` fetch a value (counted when it is fetched, not when cached);
- host syncs: each of those fetches, and each ``jax.block_until_ready`` / ``x.block_until_ready()`` call.

Not seen: NumPy arrays or Python scalars passed straight to a jitted function (an implicit transfer inside
dispatch), jnp.array/asarray of host data, and transfers made by C++ (Orbax's TensorStore writes, colocated
Python). Steps are the calls of ``pwdeploy.runtime.step_done``. At exit the counts go, as JSON, to
``$PWDEPLOY_TRANSFER_REPORT/<pid>.json`` (only from a process that reported steps). Then any other
``sitecustomize`` further along ``sys.path`` runs, as it would have without this one.
"""

from __future__ import annotations

import atexit
import importlib.machinery
import importlib.util
import os
import sys
import threading
from types import ModuleType

TYPE_CHECKING = False  # typing is not imported at every start of the job's interpreter (3 ms)
if TYPE_CHECKING:
    from typing import Any

REPORT_ENV = "PWDEPLOY_TRANSFER_REPORT"
LAYOUT_ENV = "PWDEPLOY_LOCAL_SLICE_LAYOUT"  # pwdeploy.identifiers.LOCAL_SLICE_LAYOUT_ENV (a test keeps them equal)
GCS_ENV = "PWDEPLOY_LOCAL_GCS"  # pwdeploy.local.gcs_redirect.MARKER: the job's gs:// is on the local emulator
_HERE = os.path.dirname(os.path.abspath(__file__))


class Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.h2d = self.d2h = self.syncs = 0
        self.steps: list[tuple[int, int, int, int]] = []  # (step, h2d, d2h, syncs) at each step_done
        self.depth = threading.local()
        self.jax: ModuleType | None = None  # once the program imported it

    def add(self, h2d: int = 0, d2h: int = 0, syncs: int = 0) -> None:
        with self.lock:
            self.h2d += h2d
            self.d2h += d2h
            self.syncs += syncs

    def step(self, step: int) -> None:
        with self.lock:
            self.steps.append((step, self.h2d, self.d2h, self.syncs))

    def as_json(self) -> dict[str, Any]:
        found = {"h2d": self.h2d, "d2h": self.d2h, "syncs": self.syncs, "steps": self.steps, "jax": bool(self.jax)}
        return found | ({"cache_dir": _cache_dir(self.jax)} if self.jax is not None else {})


def _cache_dir(jax: ModuleType) -> str | None:
    """The compilation cache the program ended with (its own ``jax_compilation_cache_dir`` setting wins over the
    ``JAX_COMPILATION_CACHE_DIR`` local run sets); None when JAX's config cannot say."""
    try:
        value = jax.config.jax_compilation_cache_dir
    except Exception:
        return None
    return value if isinstance(value, str) else None


COUNTS = Counts()


def _nbytes(leaf: Any) -> int:
    size = getattr(leaf, "nbytes", None)
    if isinstance(size, int):
        return size
    return 8 if isinstance(leaf, (bool, int, float, complex)) else 0


def _wrap_device_put(jax: ModuleType) -> None:
    original = jax.device_put

    def device_put(x: Any, *args: Any, **kwargs: Any) -> Any:
        host = [leaf for leaf in jax.tree.leaves(x) if not isinstance(leaf, jax.Array)]
        COUNTS.add(h2d=sum(_nbytes(leaf) for leaf in host))
        return original(x, *args, **kwargs)

    setattr(jax, "device_put", device_put)  # noqa: B010 (a module attribute, replaced)
    make = jax.make_array_from_callback

    def make_array_from_callback(shape: Any, sharding: Any, callback: Any, *args: Any, **kwargs: Any) -> Any:
        def counted(index: Any) -> Any:
            data = callback(index)
            if not isinstance(data, jax.Array):
                COUNTS.add(h2d=_nbytes(data))
            return data

        return make(shape, sharding, counted, *args, **kwargs)

    setattr(jax, "make_array_from_callback", make_array_from_callback)  # noqa: B010


def _wrap_array(jax: ModuleType) -> None:
    from jax._src import array

    impl: Any = array.ArrayImpl
    value = impl._value
    block = impl.block_until_ready

    def _value(self: Any) -> Any:
        if self._npy_value is None:
            COUNTS.add(d2h=int(self.nbytes), syncs=1)
        return value.fget(self)

    def block_until_ready(self: Any) -> Any:
        if not getattr(COUNTS.depth, "inside", False):
            COUNTS.add(syncs=1)
        return block(self)

    impl._value = property(_value)
    impl.block_until_ready = block_until_ready
    whole = jax.block_until_ready

    def block_tree(x: Any) -> Any:
        COUNTS.add(syncs=1)
        COUNTS.depth.inside = True
        try:
            return whole(x)
        finally:
            COUNTS.depth.inside = False

    setattr(jax, "block_until_ready", block_tree)  # noqa: B010


def _wrap_step_done(runtime: ModuleType) -> None:
    original = runtime.step_done

    def step_done(step: int, *args: Any, **kwargs: Any) -> Any:
        COUNTS.step(step)
        return original(step, *args, **kwargs)

    setattr(runtime, "step_done", step_done)  # noqa: B010


def _slices_of(layout: str) -> dict[int, int]:
    """``"0-3 4-7"`` -> device id -> the slice it stands for."""
    slice_of = {}
    for index, item in enumerate(layout.split()):
        first, _, last = item.partition("-")
        for device in range(int(first), int(last or first) + 1):
            slice_of[device] = index
    return slice_of


def _give_slice_index(jax: ModuleType) -> None:
    layout = os.environ.get(LAYOUT_ENV, "")
    device_class: Any = jax.Device
    if not layout.strip() or "slice_index" in vars(device_class):
        return
    slice_of = _slices_of(layout)

    def slice_index(device: Any) -> int:
        found = slice_of.get(device.id) if device.platform == "cpu" else None
        if found is None:
            raise AttributeError(f"Device {device} does not have attribute slice_index")
        return found

    device_class.slice_index = property(slice_index)


def _wrap_jax(jax: ModuleType) -> None:
    COUNTS.jax = jax
    try:
        _give_slice_index(jax)
    except Exception as error:  # a jaxlib whose Device takes no property: the devices keep what they have
        print(f"pwdeploy local: devices have no slice_index ({type(error).__name__}: {error})", file=sys.stderr)
    _wrap_device_put(jax)
    _wrap_array(jax)


def _wrap_epath(backend: ModuleType) -> None:
    """With the job's gs:// on the local GCS emulator (``PWDEPLOY_LOCAL_GCS``), etils.epath goes through gcsfs
    (``EPATH_USE_TF=false``: TensorFlow's GCS client has no emulator hook). Where the job's environment has
    TensorFlow, epath's own choice on the cluster is tf.io.gfile, whose ``makedirs`` leaves a folder that
    ``exists()`` (it writes a ``folder/`` object), where gcsfs makes nothing until a file is written under it; a
    trainer that checks its output folder after making it (MaxText's ``mkdir_and_check_permissions``), or lists it
    (Orbax's CheckpointManager, looking for earlier steps), then fails locally only. So, in this process, a gs://
    folder epath made exists, is a folder and lists as empty until files are written in it, as tf.io.gfile has
    it."""
    import importlib.util

    if os.environ.get(GCS_ENV) != "1" or importlib.util.find_spec("tensorflow") is None:
        return
    made = _MadeFolders()
    fsspec_backend: Any = backend._FileSystemSpecBackend
    fsspec_backend.makedirs = made.making(fsspec_backend.makedirs)
    fsspec_backend.mkdir = made.making(fsspec_backend.mkdir)
    fsspec_backend.exists = made.seeing(fsspec_backend.exists)
    fsspec_backend.isdir = made.seeing(fsspec_backend.isdir)
    fsspec_backend.listdir = made.listing(fsspec_backend.listdir)


class _MadeFolders:
    """The gs:// folders epath made in this process (and their parents), which then exist, are folders and list
    as empty until files are written in them."""

    def __init__(self) -> None:
        self.made: set[str] = set()

    def note(self, path: Any) -> None:
        text = os.fspath(path).rstrip("/")
        while text.startswith("gs://") and text.count("/") > 2:
            self.made.add(text)
            text = text.rsplit("/", 1)[0]

    def making(self, original: Any) -> Any:
        def wrapped(backend: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(backend, path, *args, **kwargs)
            self.note(path)
            return result

        return wrapped

    def seeing(self, original: Any) -> Any:
        def wrapped(backend: Any, path: Any) -> bool:
            return bool(original(backend, path)) or os.fspath(path).rstrip("/") in self.made

        return wrapped

    def listing(self, original: Any) -> Any:
        def wrapped(backend: Any, path: Any) -> Any:
            try:
                return original(backend, path)
            except FileNotFoundError:
                if os.fspath(path).rstrip("/") in self.made:
                    return []
                raise

        return wrapped


_AFTER_IMPORT = {"jax": _wrap_jax, "pwdeploy.runtime": _wrap_step_done, "etils.epath.backend": _wrap_epath}


class _Finder:
    """Runs the wrapper of a module right after Python has imported it.

    A meta path finder and a loader need only these methods: importlib.abc's base classes would import
    importlib.resources, tempfile and typing (12 ms) at every start of the job's interpreter."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _AFTER_IMPORT:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, _AFTER_IMPORT[name])
                return spec
        return None


class _Loader:
    def __init__(self, loader: Any, after: Any) -> None:
        self.loader, self.after = loader, after

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, get_code, ...: the real loader's
        return getattr(self.loader, name)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        module.__loader__ = self.loader  # the package's own loader again, for whatever reads its files later
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        try:
            self.after(module)
        except Exception as error:  # a JAX without these entry points: the job runs, unmeasured
            print(f"pwdeploy local: transfers not measured ({type(error).__name__}: {error})", file=sys.stderr)


def _write() -> None:
    folder = os.environ.get(REPORT_ENV)
    if not folder or not (COUNTS.steps or COUNTS.jax):
        return
    import json

    try:
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w", encoding="utf-8") as out:
            json.dump(COUNTS.as_json(), out)
    except OSError:
        pass


def _next_sitecustomize() -> None:
    """Run the ``sitecustomize`` that this one hides, if any."""
    rest = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if os.environ.get(REPORT_ENV):
    sys.meta_path.insert(0, _Finder())
    atexit.register(_write)
_next_sitecustomize()
