"""Where `pwdeploy render`'s start-up goes, from `python -X importtime`, against `import click, yaml`.

Each command runs --runs times; a module's self time is its smallest over the runs (a loaded machine only adds
to it), summed per group: the interpreter's start-up (site, encodings, ...), the editable-install finder that a
`pip install -e` puts in site-packages (a .pth file imports it at every start, whatever the command), click,
yaml, pwdeploy's own modules, and the rest of the standard library; a module counts in the group of the first
import that brought it in (what the finder imports at start-up is charged to it, though click would import some
of it later anyway). The finder's own whole-process cost is measured apart: `python -S` with and without running
site-packages' .pth files.

With ``--baseline DIR`` (another source tree, e.g. ``git archive REV | tar -x -C DIR``), `pwdeploy render` is also
run from DIR (``PYTHONPATH=DIR``), interleaved with this tree's runs, and the two are compared: the modules each
imports, pwdeploy's own import time, and the modules only one of them imports. Both trees are byte-compiled first
(``PYTHONDONTWRITEBYTECODE`` would otherwise leave one of them compiling its sources at every run).

Usage: python3 benchmarks/bench_imports.py [--runs 15] [--top 12] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data_parallel" / "job.yaml"
STARTUP = ("site", "encodings", "codecs", "io", "abc", "os", "stat", "posixpath", "genericpath", "_sitebuiltins")
COMMANDS = {
    "import click, yaml": ["-c", "import click, yaml"],
    "pwdeploy render": ["-m", "pwdeploy", "render", "-f", str(EXAMPLE)],
}


def self_times(argv: list[str], tree: Path | None = None) -> dict[str, tuple[int, frozenset[str]]]:
    """module -> (self time in us, the modules whose import brought it in); ``tree``: import pwdeploy from there."""
    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, check=True, env=env, cwd="/"
    )
    found: dict[str, tuple[int, frozenset[str]]] = {}
    below: dict[str, set[str]] = defaultdict(set)  # module -> every module its import brought in
    done: list[tuple[str, int]] = []  # modules whose parent has not finished yet (importtime prints children first)
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, _, name = line[len("import time:") :].split("|")
        module, depth = name.strip(), (len(name) - len(name.lstrip()) - 1) // 2
        while done and done[-1][1] > depth:
            child = done.pop()[0]
            below[module] |= {child, *below[child]}
        done.append((module, depth))
        found[module] = (int(own), frozenset())
    for parent, children in below.items():
        for child in children:
            value, ancestors = found[child]
            found[child] = (value, ancestors | {parent})
    return found


def group(module: str, ancestors: frozenset[str]) -> str:
    if any("__editable__" in name for name in (module, *ancestors)) or module == "_distutils_hack":
        return "editable finder (.pth)"
    for prefix in ("pwdeploy", "click", "yaml"):
        if module == prefix or module.startswith(prefix + "."):
            return prefix
    if module.split(".")[0] in STARTUP or ancestors & set(STARTUP):
        return "start-up (site, encodings)"
    return "stdlib (other)"


def site_packages() -> str:
    import click

    return str(Path(click.__file__).resolve().parents[1])


def finder_cost(runs: int) -> tuple[float, float]:
    """Whole-process `import click, yaml` with the site-packages .pth files run (the editable finder among them)
    and without, interleaved; medians in seconds."""
    folder = site_packages()
    with_pth = f"import site; site.addsitedir({folder!r}); import click, yaml"
    without = f"import sys; sys.path.append({folder!r}); import click, yaml"
    samples: dict[str, list[float]] = {"with": [], "without": []}
    for _ in range(runs):
        for name, code in (("with", with_pth), ("without", without)):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-S", "-c", code], check=True)
            samples[name].append(time.perf_counter() - start)
    return statistics.median(samples["with"]), statistics.median(samples["without"])


def compare(baseline: Path, runs: int) -> None:
    """`pwdeploy render` from ``baseline`` and from this tree, interleaved: each module's best of ``runs``."""
    here = Path(__file__).resolve().parents[1]
    for tree in (baseline, here):
        compileall.compile_dir(str(tree / "pwdeploy"), quiet=1)
    best: dict[Path, dict[str, int]] = {baseline: {}, here: {}}
    for _ in range(runs):
        for tree, found in best.items():
            for module, (value, _parents) in self_times(COMMANDS["pwdeploy render"], tree).items():
                found[module] = min(value, found.get(module, value))
    own = {tree: sum(v for m, v in found.items() if m.startswith("pwdeploy")) for tree, found in best.items()}
    for tree, found in best.items():
        name = "this tree" if tree == here else f"baseline {tree}"
        print(
            f"pwdeploy render, {name}: {len(found)} modules ({sum(m.startswith('pwdeploy') for m in found)} of "
            f"pwdeploy), {sum(found.values()) / 1000:.1f} ms of imports, pwdeploy's own {own[tree] / 1000:.1f} ms"
        )
    print(f"  pwdeploy's own, this tree / baseline: {own[here] / own[baseline]:.2f}x (best of {runs} each)")
    print(f"  imported here only: {sorted(set(best[here]) - set(best[baseline])) or 'none'}")
    print(f"  imported by the baseline only: {sorted(set(best[baseline]) - set(best[here])) or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--baseline", type=Path, help="another source tree to compare `pwdeploy render` with")
    args = parser.parse_args()
    if args.baseline is not None:
        compare(args.baseline.resolve(), args.runs)
        return
    for title, argv in COMMANDS.items():
        best: dict[str, int] = {}
        ancestors: dict[str, frozenset[str]] = {}
        for _ in range(args.runs):
            for module, (value, parents) in self_times(argv).items():
                best[module] = min(value, best.get(module, value))
                ancestors[module] = parents
        groups: dict[str, int] = defaultdict(int)
        for module, value in best.items():
            groups[group(module, ancestors[module])] += value
        total = sum(best.values())
        print(f"{title}: {len(best)} modules, {total / 1000:.1f} ms of imports (each module's best of {args.runs})")
        for name, value in sorted(groups.items(), key=lambda item: -item[1]):
            print(f"  {name:28s} {value / 1000:6.1f} ms")
        if title == "pwdeploy render":
            print(f"  largest pwdeploy modules (self time, best of {args.runs}):")
            own = sorted((v, m) for m, v in best.items() if m.startswith("pwdeploy"))[::-1][: args.top]
            for value, module in own:
                print(f"    {module:40s} {value / 1000:6.2f} ms")
    with_pth, without = finder_cost(args.runs)
    print(
        f"python -S -c 'import click, yaml', whole process, median of {args.runs}: with the site-packages .pth files "
        f"{with_pth * 1000:.1f} ms, without {without * 1000:.1f} ms: the editable finder costs "
        f"{(with_pth - without) * 1000:.1f} ms at every start"
    )


if __name__ == "__main__":
    main()
