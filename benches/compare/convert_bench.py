"""Side-by-side conversion benchmark: `compact convert` vs the Python baseline, same data, same
run, alternating, warm page cache. Prints a table of medians and the ratio, and a JSON line.

usage: convert_bench.py COMPACT_BIN PYTHON DATA_DIR [--runs 3]
DATA_DIR holds cubes/ and labels.csv (as `compact generate` writes them).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time


def warm(cubes: str) -> None:
    # The kernel here drops page cache idle for ~30 s: re-read right before each run.
    for name in os.listdir(cubes):
        with open(os.path.join(cubes, name), "rb") as f:
            while f.read(1 << 22):
                pass


def run(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        sys.exit(f"{cmd[0]} failed: {proc.stderr.read().decode()}")
    return seconds, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("compact")
    ap.add_argument("python")
    ap.add_argument("data")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    cubes = os.path.join(args.data, "cubes")
    labels = os.path.join(args.data, "labels.csv")
    files = [n for n in os.listdir(cubes) if n.endswith(".npy")]
    total_bytes = sum(os.path.getsize(os.path.join(cubes, n)) for n in files)
    here = os.path.dirname(os.path.abspath(__file__))
    methods = {
        "voxlake compact convert": lambda t: [args.compact, "convert", cubes, t, "--labels", labels],
        "python numpy+pyarrow+write_deltalake": lambda t: [
            args.python, os.path.join(here, "convert_python.py"), cubes, labels, t],
    }
    results: dict[str, list[tuple[float, int]]] = {m: [] for m in methods}
    for i in range(args.runs):
        for name, cmd in methods.items():
            table = os.path.join(args.data, f"bench-table-{i}")
            shutil.rmtree(table, ignore_errors=True)
            warm(cubes)
            results[name].append(run(cmd(table)))
            shutil.rmtree(table, ignore_errors=True)
    rows = {}
    for name, rs in results.items():
        secs = statistics.median(r[0] for r in rs)
        rss = max(r[1] for r in rs)
        rows[name] = {"seconds": secs, "files_per_s": len(files) / secs,
                      "mb_per_s": total_bytes / 1e6 / secs, "peak_rss_mb": rss / 1e6,
                      "runs": [round(r[0], 3) for r in rs]}
    print(f"{len(files)} cubes, {total_bytes / 1e6:.0f} MB, median of {args.runs} alternating runs, warm page cache")
    print(f"{'method':40} {'s':>7} {'files/s':>9} {'MB/s':>8} {'peak RSS MB':>12}")
    for name, r in rows.items():
        print(f"{name:40} {r['seconds']:7.2f} {r['files_per_s']:9.0f} {r['mb_per_s']:8.0f} {r['peak_rss_mb']:12.0f}")
    # Peak memory must not grow with the number of files: a quarter of the keys vs all.
    scale = {}
    for label, extra in (("1/4 of the files", ["--shard", "0/4"]), ("all files", [])):
        table = os.path.join(args.data, "bench-table-scale")
        shutil.rmtree(table, ignore_errors=True)
        warm(cubes)
        _, rss = run(methods["voxlake compact convert"](table) + extra)
        shutil.rmtree(table, ignore_errors=True)
        scale[label] = rss / 1e6
    print("voxlake peak RSS MB by input size: " + ", ".join(f"{k}: {v:.0f}" for k, v in scale.items()))
    names = list(rows)
    ratio = rows[names[1]]["seconds"] / rows[names[0]]["seconds"]
    print(f"voxlake / python throughput ratio: {ratio:.1f}x")
    print(json.dumps({"files": len(files), "bytes": total_bytes, "results": rows, "ratio": ratio, "peak_rss_mb_by_size": scale}))


if __name__ == "__main__":
    main()
