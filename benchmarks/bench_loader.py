"""The example's Grain loader, measured side by side in one run (interleaved rounds; medians reported).

1. Loader throughput, examples/s, with 0 workers (in-process) and 2 worker processes, reading an ArrayRecord file
   through the example's pipeline (examples/data_parallel/loaders.py: grain_batches) with no training attached.
2. Peak /dev/shm use of the 2-worker loader: what ``runtime.shm_peak_bytes`` predicts for the buffer
   ``runtime.prefetch_buffer`` chose, against the peak measured (statvfs of /dev/shm sampled every 2 ms,
   minus its use before the loader started).

Each measurement runs in a fresh process (workers start with spawn; /dev/shm starts from its baseline).
Usage: python3 benchmarks/bench_loader.py [--runs N] [--batches N] [--batch-kib N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE_DIR = REPO / "examples" / "data_parallel"
BATCH = 64  # records per batch
RECORDS = 8 * BATCH


def decode(record: bytes) -> tuple[Any]:
    """A record as the example's pipeline expects: a tuple of arrays (here one)."""
    import numpy as np

    return (np.frombuffer(record, dtype=np.float32),)


def write_records(path: Path, record_bytes: int) -> None:
    import numpy as np
    from array_record.python.array_record_module import ArrayRecordWriter

    rng = np.random.default_rng(0)
    writer = ArrayRecordWriter(str(path), "group_size:1")
    for _ in range(RECORDS):
        writer.write(rng.standard_normal(record_bytes // 4, dtype=np.float32).tobytes())
    writer.close()


def shm_used() -> int:
    stat = os.statvfs("/dev/shm")
    return (stat.f_blocks - stat.f_bfree) * stat.f_frsize


def one(path: Path, workers: int, batches: int) -> dict[str, Any]:
    """Measured in this process: examples/s, the prefetch buffer chosen, peak /dev/shm above the baseline."""
    sys.path[:0] = [str(EXAMPLE_DIR), str(EXAMPLE_DIR / "sidecar" / "src")]  # where train.py finds them
    import loaders

    baseline, peak, stop = shm_used(), [0], threading.Event()

    def sample() -> None:
        while not stop.wait(0.002):
            peak[0] = max(peak[0], shm_used() - baseline)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    loaded, buffer, _ = loaders.grain_batches(path, batch=BATCH, steps=batches, workers=workers, decode=decode)
    count = sum(len(inputs) for (inputs,) in loaded)
    seconds = time.perf_counter() - start
    stop.set()
    sampler.join()
    return {"examples_per_second": count / seconds, "seconds": seconds, "buffer": buffer, "peak_shm": peak[0]}


def measure(path: Path, workers: int, batches: int) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--one", str(path), "--workers", str(workers), "--batches", str(batches)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"loader run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--batch-kib", type=int, default=1024, help="bytes of one batch, in KiB")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.workers, args.batches)))
        return
    sys.path.insert(0, str(REPO))
    from pwdeploy import runtime

    record_bytes = args.batch_kib * 1024 // BATCH
    results: dict[int, list[dict[str, Any]]] = {0: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.array_record"
        write_records(path, record_bytes)
        for _ in range(args.runs):
            for workers in results:
                results[workers].append(measure(path, workers, args.batches))
    eps = {w: statistics.median(r["examples_per_second"] for r in runs) for w, runs in results.items()}
    two = results[2]
    buffer = two[0]["buffer"]
    batch_bytes = BATCH * record_bytes
    predicted = runtime.shm_peak_bytes(batch_bytes, 2, buffer)
    measured = statistics.median(r["peak_shm"] for r in two)
    mib = 2**20
    peaks = ", ".join(f"{r['peak_shm'] / mib:.1f}" for r in two)
    print(
        f"runs: {args.runs} (medians), {args.batches} batches of {batch_bytes / mib:.2f} MiB ({BATCH} records), "
        f"cores: {len(os.sched_getaffinity(0))}"
    )
    print(
        f"1. loader examples/s, 2 workers / in-process: {eps[2] / eps[0]:.2f}x "
        f"({eps[2]:.0f} vs {eps[0]:.0f} examples/s)"
    )
    print(
        f"2. peak /dev/shm, 2 workers, prefetch buffer {buffer}: measured / predicted {measured / predicted:.2f} "
        f"({measured / mib:.1f} MiB vs {predicted / mib:.1f} MiB = (2 x (2 x {buffer} + 1) + 3) x batch; "
        f"runs: {peaks} MiB)"
    )


if __name__ == "__main__":
    main()
