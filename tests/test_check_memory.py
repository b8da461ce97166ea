"""`pwdeploy check` keeps one file's syntax tree at a time: its peak memory over 4N files is that over N files
plus the few facts kept per file, not another tree per file (measured with tracemalloc, in bytes: not a time)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from pwdeploy.check import check

MODULE = '''\
"""Module {n}."""
import functools

import jax
import jax.numpy as jnp


def loss_{n}(params, x, y):
    hidden = jnp.tanh(x @ params["w"] + params["b"])
    return jnp.mean((hidden - y) ** 2)


@functools.partial(jax.jit, donate_argnums=0)
def step_{n}(params, x, y):
    loss, grads = jax.value_and_grad(loss_{n})(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss


def train_{n}(params, batches, log_every=100):
    for i, (x, y) in enumerate(batches, start=1):
        params, loss = step_{n}(params, x, y)
        if i % log_every == 0:
            print(i, float(loss))
    return params
'''


def _peak(folder: Path, files: int) -> tuple[int, int]:
    """(peak bytes while checking ``files`` modules, the size of one module's syntax tree and index)."""
    folder.mkdir()
    for n in range(files):
        (folder / f"mod{n}.py").write_text(MODULE.format(n=n) * 8, encoding="utf-8")  # ~200 lines each
    tracemalloc.start()
    try:
        report = check(None, [folder], cwd=folder)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        from pwdeploy.check.program import Module
        from pwdeploy.check.sources import read

        before = tracemalloc.get_traced_memory()[0]
        module = read(folder / "mod0.py", "mod0", folder)
        assert isinstance(module, Module)
        list(module.of(object))  # the index, as the rules build it
        one = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(report.files) == files and not report.findings
    return peak, one


def test_peak_memory_does_not_grow_with_the_number_of_files(tmp_path: Path) -> None:
    few, tree = _peak(tmp_path / "few", 10)
    many, _ = _peak(tmp_path / "many", 40)
    per_file = (many - few) / 30
    assert tree > 100_000  # one module's tree: what keeping every tree would add per file
    assert per_file < tree / 50, f"{per_file:.0f} bytes more per file (one tree: {tree} bytes)"
