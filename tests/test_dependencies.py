"""pyproject.toml's dependencies say what the code uses: every distribution a module of pwdeploy imports is declared
(its floor proved by scripts/test-lowest.sh), and every one declared is imported by pwdeploy, or, named here with
why, by what pwdeploy starts or loads."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from importlib.metadata import distribution, packages_distributions
from pathlib import Path

from tests.conftest import REPO

# Declared, and imported by what pwdeploy starts or loads rather than by its own modules.
IMPORTED_ELSEWHERE = {
    "gcsfs": "JAX reaches a gs:// compile cache through it in the job a local run starts",
    "etils": "... and through etils.epath",
    "cloudpickle": "colocated Python pickles the job's functions with it",
    "pysocks": "urllib3.contrib.socks imports it (kube/http_client.py, a socks5:// proxy-url)",
    "kubernetes-validate": "its schema files are read where find_spec finds them (validation/kubernetes_schemas.py)",
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return {canonical(re.split(r"[\[<>=!~;\s]", line, maxsplit=1)[0]) for line in project["dependencies"]}


def imported_modules() -> set[str]:
    """Every module outside the standard library that a module of pwdeploy imports (lazily or not); of ``from a
    import b``, ``a.b`` when that is a module (``from google.cloud import storage``)."""
    found = set()
    for path in (REPO / "pwdeploy").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [_deepest(node.module, alias.name) for alias in node.names]
            found |= {n for n in names if n.split(".")[0] not in sys.stdlib_module_names | {"pwdeploy", "_sha2"}}
    return found


def _deepest(module: str, name: str) -> str:
    if module.split(".")[0] in sys.stdlib_module_names | {"pwdeploy", "_sha2"}:
        return module
    try:
        return f"{module}.{name}" if importlib.util.find_spec(f"{module}.{name}") is not None else module
    except ModuleNotFoundError:
        return module


def owner(module: str) -> str:
    """The distribution a module comes from (of a namespace package's several, such as google's, by its file)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, f"{module} is not installed, or a namespace package"
    candidates = packages_distributions()[module.split(".")[0]]
    if len(set(candidates)) == 1:
        return canonical(candidates[0])
    origin = Path(spec.origin).resolve()
    for name in candidates:
        dist = distribution(name)
        if any(Path(str(dist.locate_file(file))).resolve() == origin for file in dist.files or ()):
            return canonical(name)
    raise AssertionError(f"no distribution installed {origin}")


def test_every_distribution_pwdeploy_imports_is_declared() -> None:
    used = {module: owner(module) for module in imported_modules()}
    missing = {module: dist for module, dist in used.items() if dist not in declared()}
    assert not missing, f"imported but not declared in pyproject.toml's dependencies: {missing}"


def test_every_declared_dependency_is_imported_by_pwdeploy_or_by_what_it_starts() -> None:
    used = {owner(module) for module in imported_modules()}
    unused = declared() - used - set(IMPORTED_ELSEWHERE)
    assert not unused, f"declared but imported by nothing: {sorted(unused)}"
    assert not (set(IMPORTED_ELSEWHERE) & used), "a dependency pwdeploy imports needs no reason here"


def test_the_official_kubernetes_client_is_not_a_dependency() -> None:
    """pwdeploy's own client speaks to the API server (docs/api.md); api.from_kubernetes reads a configured
    official client without importing it."""
    assert "kubernetes" not in declared()
    assert not {m for m in imported_modules() if m.split(".")[0] == "kubernetes"}
