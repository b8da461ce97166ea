"""Validation cost inside one `pwdeploy render` process, measured in fresh processes.

For each run a new interpreter builds the example's manifests (not timed), then times
1. the first `validate_objects` call, imports and schema loading included (what `render` pays), and
2. later calls on the same objects (the per-call cost once everything is loaded).
"First call" is measured with the schema cache already written (the usual case) and with an empty cache
directory (the first render after installing or upgrading kubernetes-validate).
Target: first call <= 10 ms with a written cache.

--libraries compares pwdeploy's checker with the JSON Schema libraries it could use instead, on the same stripped
schemas and the same objects (the JobSet envelope, each replicatedJob as a batch/v1 Job, the other objects): the
import, building the validators (compiling them; for fastjsonschema also importing code it generated into a
cache folder on an earlier run), the first call and later calls. fastjsonschema is skipped when not installed.

Usage: python3 benchmarks/bench_validate.py [--runs N] [--libraries]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data_parallel" / "job.yaml"

_CHILD = """
import json, sys, time
from pathlib import Path
from pwdeploy import manifests
from pwdeploy.config import load_job
objects = manifests.build(load_job(Path(sys.argv[1]), {}))
start = time.perf_counter()
from pwdeploy.validation.validate import validate_objects
problems = validate_objects(objects)
first = time.perf_counter() - start
assert problems == [], problems
later = []
for _ in range(20):
    start = time.perf_counter()
    validate_objects(objects)
    later.append(time.perf_counter() - start)
later.sort()
print(json.dumps({"first": first, "later": later[len(later) // 2]}))
"""


def _child(env: dict[str, str]) -> dict[str, float]:
    # Installed packages come with bytecode; without it every run would time compiling the sources instead.
    env = {name: value for name, value in env.items() if name != "PYTHONDONTWRITEBYTECODE"}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(EXAMPLE)], check=True, capture_output=True, text=True, env=env
    ).stdout
    result: dict[str, float] = json.loads(out)
    return result


_LIBRARY_CHILD = """
import importlib, json, sys, time
from pathlib import Path
from pwdeploy import manifests
from pwdeploy.config import load_job
from pwdeploy.validation.checker import Checker, strip
from pwdeploy.validation.kubernetes_schemas import kind_schema
from pwdeploy.validation.schemas import JOBSET_SCHEMA, jobset_document

library, example, code_dir = sys.argv[1:]
VERSION = (1, 31)

def jobset_schema():
    document = jobset_document()
    definitions = {name: strip(sub, f"{JOBSET_SCHEMA}#/$defs/{name}") for name, sub in document["$defs"].items()}
    return strip(document, JOBSET_SCHEMA), definitions

cases = []  # (name, (root, definitions), object), as pwdeploy.validation.objects checks them
for obj in manifests.build(load_job(Path(example), {})):
    if obj["kind"] == "JobSet":
        cases.append(("JobSet", jobset_schema(), obj))
        for rj in obj["spec"]["replicatedJobs"]:
            job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": rj["template"]["spec"]}
            cases.append((f"Job_{rj['name']}", kind_schema(VERSION, "batch/v1", "Job"), job))
    elif (found := kind_schema(VERSION, obj["apiVersion"], obj["kind"])) is not None:
        cases.append((obj["kind"], found, obj))

def document(found):
    root, definitions = found
    return {**root, "$defs": dict(definitions)}

timings = {}
start = time.perf_counter()
if library == "fastjsonschema-compile" or library == "fastjsonschema-cached":
    import fastjsonschema
elif library == "jsonschema":
    import jsonschema
timings["import"] = time.perf_counter() - start
start = time.perf_counter()
if library == "pwdeploy":
    calls = [Checker(*found).errors for _, found, _ in cases]
elif library == "fastjsonschema-compile":
    calls = [fastjsonschema.compile(document(found)) for _, found, _ in cases]
elif library == "fastjsonschema-cached":
    sys.path.insert(0, code_dir)
    calls = []
    for name, found, _ in cases:
        module = Path(code_dir, f"bench_{name}.py")
        if not module.exists():
            module.write_text(fastjsonschema.compile_to_code(document(found)))
        calls.append(importlib.import_module(module.stem).validate)
else:
    calls = [(lambda v: lambda obj: list(v.iter_errors(obj)))(jsonschema.Draft202012Validator(document(found)))
             for _, found, _ in cases]
timings["build"] = time.perf_counter() - start
start = time.perf_counter()
for call, (_, _, obj) in zip(calls, cases):
    call(obj)
timings["first call"] = time.perf_counter() - start
start = time.perf_counter()
for _ in range(20):
    for call, (_, _, obj) in zip(calls, cases):
        call(obj)
timings["later calls"] = (time.perf_counter() - start) / 20
print(json.dumps(timings))
"""


def compare_libraries(runs: int) -> None:
    """Median timings of each library in fresh processes (the schema cache written, fastjsonschema's code too)."""
    import importlib.util

    libraries = ["pwdeploy", "jsonschema"]
    if importlib.util.find_spec("fastjsonschema"):
        libraries += ["fastjsonschema-compile", "fastjsonschema-cached"]
    samples: dict[str, dict[str, list[float]]] = {library: {} for library in libraries}
    with tempfile.TemporaryDirectory() as cache_dir, tempfile.TemporaryDirectory() as code_dir:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["XDG_CACHE_HOME"] = cache_dir

        def child(library: str) -> dict[str, float]:
            argv = [sys.executable, "-c", _LIBRARY_CHILD, library, str(EXAMPLE), code_dir]
            result: dict[str, float] = json.loads(
                subprocess.run(argv, check=True, capture_output=True, text=True, env=env).stdout
            )
            return result

        for library in libraries:  # writes the schema cache, fastjsonschema's code and its bytecode
            cold = child(library)
            if library == "fastjsonschema-cached":
                print(f"fastjsonschema generating the code once: {cold['build'] * 1000:.0f} ms, ", end="")
                size = sum(path.stat().st_size for path in Path(code_dir).glob("*.py"))
                print(f"{size / 1e6:.2f} MB of Python for Kubernetes 1.31")
        for _ in range(runs):
            for library in libraries:
                for name, value in child(library).items():
                    samples[library].setdefault(name, []).append(value)
    print(f"JSON Schema checks of the example's manifests, median of {runs} fresh processes (ms):")
    print(f"  {'':24s}" + "".join(f"{name:>13s}" for name in samples["pwdeploy"]) + f"{'sum':>9s}")
    for library, timings in samples.items():
        medians = [statistics.median(values) * 1000 for name, values in timings.items()]
        total = sum(medians) - medians[-1]  # what one render pays: import, build, first call
        print(f"  {library:24s}" + "".join(f"{m:13.2f}" for m in medians) + f"{total:9.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--libraries", action="store_true", help="compare JSON Schema libraries instead")
    args = parser.parse_args()
    runs = args.runs
    if args.libraries:
        compare_libraries(runs)
        return
    samples: dict[str, list[float]] = {"first call, cache written": [], "first call, empty cache": [], "later": []}
    with tempfile.TemporaryDirectory() as warm_dir:
        warm = dict(os.environ, XDG_CACHE_HOME=warm_dir)
        _child(warm)  # writes the cache
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as cold_dir:
                samples["first call, empty cache"].append(_child(dict(os.environ, XDG_CACHE_HOME=cold_dir))["first"])
            result = _child(warm)
            samples["first call, cache written"].append(result["first"])
            samples["later"].append(result["later"])
    print(f"validate_objects on the example's manifests, median of {runs} fresh processes:")
    for name, values in samples.items():
        print(f"  {name:28s} {statistics.median(values) * 1000:7.2f} ms")
    first = statistics.median(samples["first call, cache written"]) * 1000
    print(f"first call with the cache written: {first:.1f} ms (target <= 10 ms): {'ok' if first <= 10 else 'MISSED'}")


if __name__ == "__main__":
    main()
