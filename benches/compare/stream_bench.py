"""Side-by-side loading benchmark on one voxlake table: `voxlake bench` vs pyarrow row group by
row group into numpy vs `cat` of the table's files (the page-cache limit). Alternating runs,
warm page cache, medians and ratios.

usage: stream_bench.py VOXLAKE_BIN TABLE [--runs 3] [--batch-size 32] [--shuffle]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import pyarrow.parquet as pq
from deltalake import DeltaTable


def table_files(table: str) -> list[str]:
    return [u.removeprefix("file://") for u in DeltaTable(table).file_uris()]


def warm(files: list[str]) -> None:
    # The kernel here drops page cache idle for ~30 s: re-read right before each run.
    for path in files:
        with open(path, "rb") as f:
            while f.read(1 << 22):
                pass


def child(cmd: list[str]) -> tuple[float, int, str]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        sys.exit(f"{cmd[0]} failed: {proc.stderr.read().decode()}")
    return time.perf_counter() - start, usage.ru_maxrss * 1024, out


def pyarrow_epoch(files: list[str], shape: list[int], batch_size: int) -> int:
    """Row group by row group into numpy float32 batches of `batch_size`, every value touched."""
    samples = 0
    pending = []
    checksum = 0.0
    for path in files:
        pf = pq.ParquetFile(path)
        for rg in range(pf.metadata.num_row_groups):
            t = pf.read_row_group(rg, columns=["tensor", "label"])
            col = t.column("tensor").combine_chunks()
            values = np.frombuffer(col.buffers()[2], dtype="<f4")
            cubes = values[: len(col) * int(np.prod(shape))].reshape(len(col), *shape)
            labels = t.column("label").to_numpy()
            pending.append((cubes, labels))
            rows = sum(len(c) for c, _ in pending)
            while rows >= batch_size:
                x = np.concatenate([c for c, _ in pending])
                y = np.concatenate([lab for _, lab in pending])
                batch, rest = x[:batch_size], x[batch_size:]
                checksum += float(batch.sum(dtype=np.float64))
                samples += len(batch)
                pending = [(rest, y[batch_size:])] if len(rest) else []
                rows = len(rest)
    for c, _ in pending:
        checksum += float(c.sum(dtype=np.float64))
        samples += len(c)
    return samples


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("voxlake")
    ap.add_argument("table")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--shuffle", action="store_true")
    args = ap.parse_args()
    dt = DeltaTable(args.table)
    shape = json.loads(dt.metadata().configuration["voxlake.tensor.shape"])
    files = table_files(args.table)
    total_bytes = sum(os.path.getsize(f) for f in files)
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    here = os.path.dirname(os.path.abspath(__file__))

    bench = [args.voxlake, "bench", args.table, "--json", "--batch-size", str(args.batch_size)]
    if args.shuffle:
        bench.append("--shuffle")
    results: dict[str, list[dict]] = {"voxlake bench": [], "pyarrow row groups → numpy": [], "cat (page-cache limit)": []}
    for _ in range(args.runs):
        warm(files)
        secs, rss, out = child(bench)
        report = json.loads(out)
        assert report["samples"] == rows, (report["samples"], rows)
        results["voxlake bench"].append({"seconds": report["seconds"], "rss": rss, "first_batch_s": report["first_batch_s"],
                                         "consumer_wait_s": report["consumer_wait_s"]})
        warm(files)
        secs, rss, out = child([sys.executable, os.path.join(here, "stream_bench.py"), "--pyarrow-child", args.table,
                                str(args.batch_size)])
        results["pyarrow row groups → numpy"].append({"seconds": float(out.strip()), "rss": rss})
        warm(files)
        start = time.perf_counter()
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
        results["cat (page-cache limit)"].append({"seconds": time.perf_counter() - start, "rss": 0})

    summary = {}
    for name, rs in results.items():
        secs = statistics.median(r["seconds"] for r in rs)
        summary[name] = {"seconds": secs, "samples_per_s": rows / secs, "gb_per_s": total_bytes / 1e9 / secs,
                         "peak_rss_mb": max(r["rss"] for r in rs) / 1e6, "runs": [round(r["seconds"], 3) for r in rs]}
        if name == "voxlake bench":
            summary[name]["first_batch_s"] = statistics.median(r["first_batch_s"] for r in rs)
    v = summary["voxlake bench"]["samples_per_s"]
    ratios = {"voxlake/pyarrow": v / summary["pyarrow row groups → numpy"]["samples_per_s"],
              "voxlake/cat": v / summary["cat (page-cache limit)"]["samples_per_s"]}
    print(f"{rows} samples, {total_bytes / 1e6:.0f} MB in {len(files)} files, batch {args.batch_size}, "
          f"shuffle {'on' if args.shuffle else 'off'}, median of {args.runs} alternating runs, warm page cache")
    print(f"{'method':32} {'s':>7} {'samples/s':>10} {'GB/s':>6} {'peak RSS MB':>12}")
    for name, r in summary.items():
        print(f"{name:32} {r['seconds']:7.3f} {r['samples_per_s']:10.0f} {r['gb_per_s']:6.2f} {r['peak_rss_mb']:12.0f}")
    print("ratios: " + ", ".join(f"{k} {val:.2f}" for k, val in ratios.items()))
    print(json.dumps({"rows": rows, "bytes": total_bytes, "results": summary, "ratios": ratios}))


def pyarrow_child() -> None:
    table, batch_size = sys.argv[2], int(sys.argv[3])
    dt = DeltaTable(table)
    shape = json.loads(dt.metadata().configuration["voxlake.tensor.shape"])
    files = table_files(table)
    start = time.perf_counter()
    pyarrow_epoch(files, shape, batch_size)
    print(time.perf_counter() - start, flush=True)
    os._exit(0)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--pyarrow-child":
        pyarrow_child()
    else:
        main()
