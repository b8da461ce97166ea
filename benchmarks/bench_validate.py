"""Validation cost inside one `pwdeploy render` process, measured in fresh processes.

For each run a new interpreter builds the example's manifests (not timed), then times
1. the first `validate_objects` call, imports and schema loading included (what `render` pays), and
2. later calls on the same objects (the per-call cost once everything is loaded).
"First call" is measured with the schema cache already written (the usual case) and with an empty cache
directory (the first render after installing or upgrading kubernetes-validate).
Target: first call <= 10 ms with a written cache.

Usage: python3 benchmarks/bench_validate.py [--runs N]
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
from pwdeploy.validate import validate_objects
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    runs = parser.parse_args().runs
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
