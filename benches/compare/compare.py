"""Side-by-side loading comparison on one machine, one data set, one run: voxlake vs Petastorm,
pyarrow, deltalake-python, per-file np.load, torch DataLoader; and the limits (page-cache read
with `cat`, memcpy bandwidth). Methods alternate, each several times, each in a child process
(peak RSS from wait4); other processes' CPU during each run is recorded (from /proc/stat).

usage: compare.py --voxlake BIN --table DIR --cubes DIR --petastorm-python PY [--runs 3]
       compare.py --replot RESULTS.json OUT.png
Writes RESULTS.json and a PNG chart (samples/s, log scale) when --out-json / --out-png are given.
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

BATCH = 32


def cpu_ticks() -> int:
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    busy = sum(int(v) for i, v in enumerate(fields) if i not in (3, 4))  # minus idle, iowait
    return busy


def warm(paths: list[str]) -> None:
    # The kernel drops page cache idle for ~30 s: re-read right before every run.
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 22):
                pass


def run_child(cmd: list[str]) -> dict:
    ticks0 = cpu_ticks()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = proc.stdout.read().decode()
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        sys.exit(f"{' '.join(cmd[:3])} failed:\n{err[-2000:]}")
    hz = os.sysconf("SC_CLK_TCK")
    child_cpu = usage.ru_utime + usage.ru_stime
    other_cpu = max(0.0, (cpu_ticks() - ticks0) / hz - child_cpu)
    result = json.loads(out.strip().splitlines()[-1])
    result.update(wall=wall, rss=usage.ru_maxrss * 1024, other_cpu_s=other_cpu)
    return result


# ---- children: each prints one JSON line {"samples": n, "seconds": s} ----

def touch(x) -> float:
    return float(x.sum(dtype="float64"))


def child_pyarrow(table: str, shape: list[int]) -> dict:
    import numpy as np
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    files = [u.removeprefix("file://") for u in DeltaTable(table).file_uris()]
    start = time.perf_counter()
    samples, pending = 0, []
    for path in files:
        pf = pq.ParquetFile(path)
        for rg in range(pf.metadata.num_row_groups):
            col = pf.read_row_group(rg, columns=["tensor", "label"]).column("tensor").combine_chunks()
            values = np.frombuffer(col.buffers()[2], dtype="<f4")
            pending.append(values[: len(col) * int(np.prod(shape))].reshape(len(col), *shape))
            while sum(len(p) for p in pending) >= BATCH:
                x = np.concatenate(pending)
                touch(x[:BATCH])
                samples += BATCH
                pending = [x[BATCH:]] if len(x) > BATCH else []
    for p in pending:
        touch(p)
        samples += len(p)
    return {"samples": samples, "seconds": time.perf_counter() - start}


def child_deltalake(table: str, shape: list[int]) -> dict:
    import numpy as np
    from deltalake import DeltaTable

    start = time.perf_counter()
    ds = DeltaTable(table).to_pyarrow_dataset()
    samples = 0
    for batch in ds.to_batches(columns=["tensor", "label"], batch_size=BATCH):
        col = batch.column(0)
        if len(col) == 0:
            continue
        x = np.stack([np.frombuffer(v, dtype="<f4") for v in col.to_pylist()]).reshape(len(col), *shape)
        touch(x)
        samples += len(col)
    return {"samples": samples, "seconds": time.perf_counter() - start}


def child_npy(cubes: str) -> dict:
    import numpy as np

    files = sorted(glob.glob(os.path.join(cubes, "*.npy")))
    start = time.perf_counter()
    samples = 0
    for i in range(0, len(files), BATCH):
        x = np.stack([np.load(f) for f in files[i : i + BATCH]])
        touch(x)
        samples += len(x)
    return {"samples": samples, "seconds": time.perf_counter() - start}


def child_torch(cubes: str, threads: int | None) -> dict:
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset

    if threads:
        torch.set_num_threads(threads)
    files = sorted(glob.glob(os.path.join(cubes, "*.npy")))

    class Cubes(Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            return torch.from_numpy(np.load(files[i]))

    start = time.perf_counter()
    samples = 0
    for x in DataLoader(Cubes(), batch_size=BATCH, shuffle=True, num_workers=2):
        float(x.sum(dtype=torch.float64))
        samples += len(x)
    return {"samples": samples, "seconds": time.perf_counter() - start}


def child_voxlake_python(table: str, consumer: str) -> dict:
    """The `voxlake` Python package (built into .venv by run.sh): one shuffled epoch, each
    batch's tensor touched as the other children touch theirs (`f64`: numpy's sum into float64,
    which casts every value and costs ~2.3 ms a batch of reference cubes here), as `voxlake
    bench` does (`f32`: a float32 SIMD sum, numpy's `x.sum()`, ~0.6 ms), or not at all (`none`,
    set against `voxlake bench --no-touch`: the loader alone)."""
    import numpy  # noqa: F401  (imported before the clock starts, as the other children do)
    import voxlake

    start = time.perf_counter()
    samples = 0
    for batch in voxlake.Loader(table, batch_size=BATCH, shuffle=True):
        x = batch["tensor"]
        if consumer == "f64":
            touch(x)
        elif consumer == "f32":
            float(x.sum())
        samples += len(x)
    return {"samples": samples, "seconds": time.perf_counter() - start}


def child_petastorm(table: str, shape: list[int]) -> dict:
    import numpy as np
    from petastorm import make_batch_reader

    start = time.perf_counter()
    samples, pending = 0, []
    # The table's tensor column is BINARY (Petastorm drops fixed_size_list columns silently):
    # each row arrives as bytes and is turned into a cube here.
    with make_batch_reader("file://" + os.path.abspath(table), num_epochs=1, workers_count=2,
                           schema_fields=["tensor", "label"], shuffle_row_groups=True) as reader:
        for batch in reader:
            x = np.stack([np.frombuffer(v, dtype="<f4") for v in batch.tensor]).reshape(-1, *shape)
            pending.append(x)
            while sum(len(p) for p in pending) >= BATCH:
                y = np.concatenate(pending)
                touch(y[:BATCH])
                samples += BATCH
                pending = [y[BATCH:]] if len(y) > BATCH else []
    for p in pending:
        touch(p)
        samples += len(p)
    return {"samples": samples, "seconds": time.perf_counter() - start}


def child_memcpy() -> dict:
    import numpy as np

    a = np.ones(256 << 20, dtype=np.uint8)
    b = np.empty_like(a)
    np.copyto(b, a)  # fault the pages in first: this is the warm bandwidth
    start = time.perf_counter()
    for _ in range(4):
        np.copyto(b, a)
    secs = time.perf_counter() - start
    return {"bytes_per_s": 4 * a.nbytes / secs, "samples": 0, "seconds": secs}


def child_main() -> None:
    kind = sys.argv[2]
    args = sys.argv[3:]
    shape = json.loads(os.environ.get("VOXLAKE_SHAPE", "[30,30,10,10]"))
    if kind == "pyarrow":
        out = child_pyarrow(args[0], shape)
    elif kind == "deltalake":
        out = child_deltalake(args[0], shape)
    elif kind == "npy":
        out = child_npy(args[0])
    elif kind == "torch":
        out = child_torch(args[0], int(args[1]) or None)
    elif kind == "petastorm":
        out = child_petastorm(args[0], shape)
    elif kind == "voxlake-python":
        out = child_voxlake_python(args[0], args[1])
    elif kind == "memcpy":
        out = child_memcpy()
    else:
        sys.exit(f"unknown child {kind}")
    print(json.dumps(out), flush=True)
    os._exit(0)  # deltalake-python can abort in a destructor at exit


def plot(report: dict, path: str) -> None:
    """A bar chart of samples/s per method, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary, rows = report["results"], report["rows"]
    items = sorted(summary.items(), key=lambda kv: kv[1]["samples_per_s"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = ["#d62728" if n.startswith("voxlake") else "#7f7f7f" if n.startswith("cat") else "#1f77b4"
              for n, _ in items]
    ax.barh([n for n, _ in items], [r["samples_per_s"] for _, r in items], color=colors)
    ax.set_xscale("log")
    ax.set_xlabel("samples/s (30×30×10×10 float32 cubes, batches of 32), log scale")
    ax.set_title(f"One epoch of {rows} cubes, 2 cores, warm page cache, {report['date']}", fontsize=10)
    for i, (_, r) in enumerate(items):
        ax.text(r["samples_per_s"], i, f" {r['samples_per_s']:,.0f}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--replot":
        with open(sys.argv[2]) as f:
            plot(json.load(f), sys.argv[3])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--voxlake", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--cubes", required=True)
    ap.add_argument("--petastorm-python", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out-json")
    ap.add_argument("--out-png")
    ap.add_argument("--only", help="run only the methods whose names contain one of these (comma-separated)")
    args = ap.parse_args()
    me = os.path.abspath(__file__)
    py = sys.executable
    table_files = sorted(glob.glob(os.path.join(args.table, "*.parquet")))
    cube_files = sorted(glob.glob(os.path.join(args.cubes, "*.npy")))
    table_bytes = sum(os.path.getsize(f) for f in table_files)

    def vox(shuffle: bool):
        cmd = [args.voxlake, "bench", args.table, "--json", "--batch-size", str(BATCH)]
        return cmd + (["--shuffle"] if shuffle else [])

    methods = {
        "voxlake (shuffled)": (vox(True), table_files),
        "voxlake (table order)": (vox(False), table_files),
        "voxlake Python package (shuffled)": ([py, me, "--child", "voxlake-python", args.table, "f64"], table_files),
        "voxlake Python package (shuffled, bench's f32 sum)": (
            [py, me, "--child", "voxlake-python", args.table, "f32"], table_files),
        "voxlake (shuffled, values not read)": (vox(True) + ["--no-touch"], table_files),
        "voxlake Python package (shuffled, values not read)": (
            [py, me, "--child", "voxlake-python", args.table, "none"], table_files),
        "Petastorm make_batch_reader": ([args.petastorm_python, me, "--child", "petastorm", args.table], table_files),
        "pyarrow row groups": ([py, me, "--child", "pyarrow", args.table], table_files),
        "deltalake-python scanner": ([py, me, "--child", "deltalake", args.table], table_files),
        "per-file np.load": ([py, me, "--child", "npy", args.cubes], cube_files),
        "torch DataLoader, 2 workers": ([py, me, "--child", "torch", args.cubes, "0"], cube_files),
        "torch DataLoader, 2 workers, 1 thread": ([py, me, "--child", "torch", args.cubes, "1"], cube_files),
    }
    if args.only:
        wanted = args.only.split(",")
        methods = {n: m for n, m in methods.items() if any(w in n for w in wanted)}
    results: dict[str, list[dict]] = {m: [] for m in methods}
    cat_runs, memcpy = [], run_child([py, me, "--child", "memcpy"])
    for _ in range(args.runs):
        for name, (cmd, files) in methods.items():
            warm(files)
            r = run_child(cmd)
            results[name].append(r)
        warm(table_files)
        start = time.perf_counter()
        subprocess.run(["cat", *table_files], stdout=subprocess.DEVNULL, check=True)
        cat_runs.append(time.perf_counter() - start)

    rows = len(cube_files)
    summary = {}
    for name, rs in results.items():
        secs = statistics.median(r["seconds"] for r in rs)
        assert all(r["samples"] == rows for r in rs), (name, [r["samples"] for r in rs])
        summary[name] = {"samples_per_s": rows / secs, "seconds": secs,
                         "peak_rss_mb": max(r["rss"] for r in rs) / 1e6,
                         "other_cpu_s": max(r["other_cpu_s"] for r in rs),
                         "runs": [round(r["seconds"], 3) for r in rs]}
    cat_s = statistics.median(cat_runs)
    summary["cat (page-cache limit)"] = {"samples_per_s": rows / cat_s, "seconds": cat_s, "peak_rss_mb": 0,
                                         "other_cpu_s": 0, "runs": [round(c, 3) for c in cat_runs]}
    rate = {n: r["samples_per_s"] for n, r in summary.items()}
    v, vp = rate.get("voxlake (shuffled)"), rate.get("voxlake Python package (shuffled)")
    pairs = {
        "voxlake/Petastorm": (v, "Petastorm make_batch_reader"),
        "voxlake/pyarrow": (v, "pyarrow row groups"),
        "voxlake/page-cache limit": (v, "cat (page-cache limit)"),
        "voxlake Python/voxlake": (vp, "voxlake (shuffled)"),
        "voxlake Python (f32 sum)/voxlake": (rate.get("voxlake Python package (shuffled, bench's f32 sum)"),
                                             "voxlake (shuffled)"),
        "voxlake Python/voxlake, values not read": (
            rate.get("voxlake Python package (shuffled, values not read)"), "voxlake (shuffled, values not read)"),
        "voxlake Python/Petastorm": (vp, "Petastorm make_batch_reader"),
        "voxlake Python/torch DataLoader": (vp, "torch DataLoader, 2 workers"),
        "voxlake Python/pyarrow": (vp, "pyarrow row groups"),
    }
    ratios = {k: a / rate[b] for k, (a, b) in pairs.items() if a and b in rate}
    print(f"{rows} cubes, {table_bytes / 1e6:.0f} MB table, batches of {BATCH}, median of {args.runs} "
          f"alternating runs, warm page cache; memcpy {memcpy['bytes_per_s'] / 1e9:.1f} GB/s")
    print(f"| method | samples/s | GB/s | peak RSS MB | other CPU s |\n|---|---:|---:|---:|---:|")
    for name, r in sorted(summary.items(), key=lambda kv: -kv[1]["samples_per_s"]):
        gbs = r["samples_per_s"] * table_bytes / rows / 1e9
        print(f"| {name} | {r['samples_per_s']:,.0f} | {gbs:.2f} | {r['peak_rss_mb']:.0f} | {r['other_cpu_s']:.1f} |")
    print("ratios: " + ", ".join(f"{k} {x:.2f}" for k, x in ratios.items()))
    report = {"rows": rows, "table_bytes": table_bytes, "memcpy_bytes_per_s": memcpy["bytes_per_s"],
              "results": summary, "ratios": ratios, "date": time.strftime("%Y-%m-%d")}
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump(report, f, indent=1)
    if args.out_png:
        plot(report, args.out_png)
    os._exit(0)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main()
    else:
        main()
