"""The seed's experiment as a benchmark (run by benches/remote/run.sh, which starts the store and
the latency proxies): the reference cubes as `.npy` blobs in an S3 store, read per file (2
workers, 64 threads), converted with `compact convert`, and the table read with pyarrow (8
threads), voxlake cold and voxlake through a warm disk cache, at each added latency per
request, in alternating rounds; a local copy of the table is the warm cache's yardstick. Each
timed conversion converts at most ~2,000 blobs (shard 0 of COUNT/2000): every one is a table in
the store, on this machine's disk.

Rates: `epoch` is samples over the whole run (opening the table included); `streaming` is
samples over the time after the first batch (what later epochs of a long run see). Ratios are
of medians of the same run.

usage: remote.py --voxlake BIN --compact BIN --data DIR --bucket B --upload URL --endpoint 0=URL
                 --endpoint 20=URL ... [--runs 2] [--npy-files 400] [--out-json F] [--out-png F]
"""

import argparse
import concurrent.futures as cf
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import boto3
import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq

KEYS = {"aws_access_key_id": "voxlake", "aws_secret_access_key": "voxlake-secret"}


def env_for(url: str) -> dict:
    return {**os.environ, "AWS_ENDPOINT_URL": url, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": KEYS["aws_access_key_id"], "AWS_SECRET_ACCESS_KEY": KEYS["aws_secret_access_key"]}


def s3(url: str, threads: int):
    config = boto3.session.Config(max_pool_connections=max(threads, 10))
    return boto3.client("s3", endpoint_url=url, region_name="us-east-1", config=config, **KEYS)


def upload(url: str, bucket: str, data: str) -> int:
    client = s3(url, 32)
    # SeaweedFS's `-bucket` does not make it for a signed client: make it first.
    try:
        client.create_bucket(Bucket=bucket)
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    files = [(os.path.join(data, "cubes", n), f"cubes/{n}") for n in sorted(os.listdir(os.path.join(data, "cubes")))]
    files.append((os.path.join(data, "labels.csv"), "labels.csv"))
    with cf.ThreadPoolExecutor(32) as ex:
        list(ex.map(lambda f: client.upload_file(f[0], bucket, f[1]), files))
    return len(files) - 1


def per_file_npy(url: str, bucket: str, keys: list[str], threads: int) -> dict:
    """Each `.npy` blob a GET and an `np.load`, `threads` at once, every value touched."""
    client = s3(url, threads)

    def one(key: str) -> float:
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        return float(np.load(io.BytesIO(body)).sum(dtype=np.float64))

    start = time.perf_counter()
    with cf.ThreadPoolExecutor(threads) as ex:
        list(ex.map(one, keys))
    seconds = time.perf_counter() - start
    return {"samples": len(keys), "seconds": seconds, "first_batch_s": 0.0}


def store_cat(url: str, bucket: str, count: int, threads: int = 16) -> dict:
    """The store's own limit: every data file of the table fetched whole, `threads` at once,
    bytes dropped (samples/s as if they were read)."""
    client = s3(url, threads)
    start = time.perf_counter()
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="table/")
            for o in page.get("Contents", []) if o["Key"].endswith(".parquet")]

    def one(key: str) -> int:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        n = 0
        while chunk := body.read(1 << 20):
            n += len(chunk)
        return n

    with cf.ThreadPoolExecutor(threads) as ex:
        list(ex.map(one, keys))
    return {"samples": count, "seconds": time.perf_counter() - start, "first_batch_s": 0.0}


def warm(folder: str) -> None:
    """A folder's files read once (a local table, a disk cache), so that runs compared with each
    other all read the page cache, not this machine's disk."""
    for root, _, names in os.walk(folder):
        for n in names:
            with open(os.path.join(root, n), "rb") as f:
                while f.read(1 << 22):
                    pass


def pyarrow_row_groups(url: str, bucket: str, threads: int, seed: int) -> dict:
    """The table's row groups in shuffled order, `threads` read at once into numpy."""
    host = url.removeprefix("http://")
    fs = pafs.S3FileSystem(access_key=KEYS["aws_access_key_id"], secret_key=KEYS["aws_secret_access_key"],
                           endpoint_override=host, scheme="http", region="us-east-1")
    start = time.perf_counter()
    infos = fs.get_file_info(pafs.FileSelector(f"{bucket}/table"))
    files = [i.path for i in infos if i.path.endswith(".parquet")]
    units = []
    for path in files:
        with fs.open_input_file(path) as f:
            units += [(path, rg) for rg in range(pq.ParquetFile(f).metadata.num_row_groups)]
    random.Random(seed).shuffle(units)

    def one(unit) -> int:
        path, rg = unit
        with fs.open_input_file(path) as f:
            t = pq.ParquetFile(f).read_row_group(rg, columns=["tensor", "label"])
        col = t.column("tensor").combine_chunks()
        float(np.frombuffer(col.buffers()[2], dtype="<f4").sum(dtype=np.float64))
        return len(col)

    first = None
    samples = 0
    with cf.ThreadPoolExecutor(threads) as ex:
        for n in ex.map(one, units):
            first = first or time.perf_counter() - start
            samples += n
    return {"samples": samples, "seconds": time.perf_counter() - start, "first_batch_s": first or 0.0}


def voxlake(bin_: str, table: str, env: dict, *args: str, seed: str = "1") -> dict:
    out = subprocess.run([bin_, "bench", table, "--shuffle", "--seed", seed, "--json", *args], env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"voxlake bench failed: {out.stderr}")
    r = json.loads(out.stdout)
    return {"samples": r["samples"], "seconds": r["seconds"], "first_batch_s": r["first_batch_s"],
            "store_bytes": r["store_bytes_read"], "cache_hits": r["cache_hits"],
            "reads_in_flight": r["reads_in_flight"], "peak_rss_mb": (r["peak_rss_bytes"] or 0) / 1e6,
            "cpu_cores": r["cpu_cores"]}


def convert(bin_: str, url: str, bucket: str, table: str, shards: int = 1) -> dict:
    """`compact convert` of the blobs (of shard 0 of `shards`: the rate needs no more, and every
    timed conversion is a table in the store, on this machine's disk)."""
    shard = ["--shard", f"0/{shards}"] if shards > 1 else []
    out = subprocess.run([bin_, "convert", f"s3://{bucket}/cubes", f"s3://{bucket}/{table}", "--labels",
                          f"s3://{bucket}/labels.csv", "--json", *shard], env=env_for(url), capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit(f"compact convert failed: {out.stderr}")
    r = json.loads(out.stdout)
    return {"files": r["files"], "seconds": r["seconds"], **{k: r[k] for k in r if k.endswith("_s")}}


def rates(runs: list[dict]) -> dict:
    epoch = statistics.median(r["samples"] / r["seconds"] for r in runs)
    streaming = statistics.median(r["samples"] / max(r["seconds"] - r["first_batch_s"], 1e-9) for r in runs)
    out = {"epoch_samples_per_s": epoch, "streaming_samples_per_s": streaming,
           "first_batch_s": statistics.median(r["first_batch_s"] for r in runs), "runs": runs}
    return out


def plot(report: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(next(iter(report["latencies"].values()))["readers"].keys())
    lats = list(report["latencies"].keys())
    fig, ax = plt.subplots(figsize=(9, 4.8))
    width = 0.8 / len(lats)
    for i, lat in enumerate(lats):
        vals = [report["latencies"][lat]["readers"][m]["epoch_samples_per_s"] for m in methods]
        bars = ax.bar([x + i * width for x in range(len(methods))], vals, width, label=f"+{lat} ms per request")
        ax.bar_label(bars, fmt="%.0f", fontsize=7, rotation=90, padding=2)
    ax.set_xticks([x + width * (len(lats) - 1) / 2 for x in range(len(methods))], methods, rotation=20,
                  ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 3)  # room for the labels above the tallest bars
    ax.set_ylabel("samples/s (one epoch, opening included)")
    ax.set_title(f"{report['count']} reference cubes in S3 (SeaweedFS), {report['machine']}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--voxlake", required=True)
    ap.add_argument("--compact", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--endpoint", action="append", required=True, help="LATENCY_MS=URL")
    # The blobs go up once, straight to the store: the proxies are for what is measured.
    ap.add_argument("--upload", required=True, help="the store itself, for the upload")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--npy-files", type=int, default=400)
    ap.add_argument("--out-json")
    ap.add_argument("--out-png")
    args = ap.parse_args()
    endpoints = dict(e.split("=", 1) for e in args.endpoint)
    no_latency = endpoints["0"]
    count = upload(args.upload, args.bucket, args.data)
    print(f"uploaded {count} cubes", flush=True)

    # Conversion at every latency (tables of their own), then the table every reader reads.
    conversions = {lat: [] for lat in endpoints}
    shards = -(-count // 2000)
    for r in range(args.runs):
        for lat, url in endpoints.items():
            conversions[lat].append(convert(args.compact, url, args.bucket, f"converted-{lat}-{r}", shards))
    convert(args.compact, no_latency, args.bucket, "table")
    local = os.path.join(args.data, "table")
    if not os.path.isdir(os.path.join(local, "_delta_log")):
        subprocess.run([args.compact, "convert", os.path.join(args.data, "cubes"), local, "--labels",
                        os.path.join(args.data, "labels.csv")], check=True, capture_output=True)

    keys = [f"cubes/{n}" for n in sorted(os.listdir(os.path.join(args.data, "cubes")))]
    random.Random(7).shuffle(keys)
    keys = keys[: args.npy_files]
    table = f"s3://{args.bucket}/table"
    caches = {lat: tempfile.mkdtemp(prefix=f"voxlake-cache-{lat}-") for lat in endpoints}
    readers = {lat: {} for lat in endpoints}
    local_runs = []
    filling = {lat: [] for lat in endpoints}

    def add(lat, name, result):
        readers[lat].setdefault(name, []).append(result)

    for r in range(args.runs):
        warm(local)
        local_runs.append(voxlake(args.voxlake, local, dict(os.environ)))
        for lat, url in endpoints.items():
            env = env_for(url)
            add(lat, "per-file .npy, 2 workers", per_file_npy(url, args.bucket, keys, 2))
            add(lat, "per-file .npy, 64 threads", per_file_npy(url, args.bucket, keys, 64))
            add(lat, "pyarrow row groups, 8 threads", pyarrow_row_groups(url, args.bucket, 8, r))
            add(lat, "voxlake, cold", voxlake(args.voxlake, table, env, "--no-cache"))
            add(lat, "whole files, 16 threads (the store's limit)", store_cat(url, args.bucket, count))
            if r == 0:
                filling[lat].append(voxlake(args.voxlake, table, env, "--cache-dir", caches[lat]))
            warm(caches[lat])  # in the page cache, as the local table it is compared with
            warm_run = voxlake(args.voxlake, table, env, "--cache-dir", caches[lat])
            if warm_run["cache_hits"] == 0:
                sys.exit(f"the warm cache in {caches[lat]} had no hits (is its disk full?)")
            add(lat, "voxlake, warm cache", warm_run)
            print(f"round {r + 1}, +{lat} ms: done", flush=True)
    for path in caches.values():
        shutil.rmtree(path, ignore_errors=True)

    # Two processes of one node at once through one fresh cache, at the first latency added.
    lat = next((l for l in endpoints if l != "0"), "0")
    shared = tempfile.mkdtemp(prefix="voxlake-cache-shared-")
    env = env_for(endpoints[lat])
    with cf.ThreadPoolExecutor(2) as ex:
        pair = list(ex.map(lambda seed: voxlake(args.voxlake, table, env, "--cache-dir", shared, seed=seed),
                           ["1", "2"]))
    shutil.rmtree(shared, ignore_errors=True)
    table_bytes = readers[lat]["voxlake, cold"][0]["store_bytes"]

    local_rates = rates(local_runs)
    report = {"count": count, "machine": f"{os.cpu_count()} cores", "runs": args.runs,
              "npy_files": len(keys), "local_table": local_rates, "latencies": {},
              "two_processes_one_cache": {"latency_ms": lat, "table_bytes": table_bytes,
                                          "store_bytes_fetched": [p["store_bytes"] for p in pair],
                                          "fetched_over_table": sum(p["store_bytes"] for p in pair) / table_bytes}}
    for lat in endpoints:
        rs = {name: rates(runs) for name, runs in readers[lat].items()}
        rs["voxlake, filling the cache"] = rates(filling[lat])
        conv = conversions[lat]
        c = {"files_per_s": statistics.median(x["files"] / x["seconds"] for x in conv), "runs": conv}
        report["latencies"][lat] = {"readers": rs, "convert": c}
    base = report["latencies"]["0"]
    for lat, entry in report["latencies"].items():
        rs = entry["readers"]
        cold = rs["voxlake, cold"]
        entry["ratios"] = {
            "cold / cold without latency (epoch)": cold["epoch_samples_per_s"] / base["readers"]["voxlake, cold"]["epoch_samples_per_s"],
            "cold / cold without latency (streaming)": cold["streaming_samples_per_s"] / base["readers"]["voxlake, cold"]["streaming_samples_per_s"],
            "warm cache / local table (epoch)": rs["voxlake, warm cache"]["epoch_samples_per_s"] / local_rates["epoch_samples_per_s"],
            "warm cache / local table (streaming)": rs["voxlake, warm cache"]["streaming_samples_per_s"] / local_rates["streaming_samples_per_s"],
            "voxlake cold / per-file .npy, 2 workers": cold["epoch_samples_per_s"] / rs["per-file .npy, 2 workers"]["epoch_samples_per_s"],
            "voxlake cold / pyarrow, 8 threads": cold["epoch_samples_per_s"] / rs["pyarrow row groups, 8 threads"]["epoch_samples_per_s"],
            "voxlake cold / whole files (the store's limit)": cold["epoch_samples_per_s"] / rs["whole files, 16 threads (the store's limit)"]["epoch_samples_per_s"],
            "convert / convert without latency": entry["convert"]["files_per_s"] / base["convert"]["files_per_s"],
        }

    print(f"\n{count} cubes, {report['machine']}, median of {args.runs} alternating rounds "
          f"(per-file readers: {len(keys)} files); samples/s over the epoch (streaming: after the first batch)")
    print(f"local table: {local_rates['epoch_samples_per_s']:.0f} ({local_rates['streaming_samples_per_s']:.0f})")
    for lat, entry in report["latencies"].items():
        print(f"\n+{lat} ms per request: compact convert {entry['convert']['files_per_s']:.0f} files/s")
        for name, r in entry["readers"].items():
            print(f"  {name:32} {r['epoch_samples_per_s']:8.0f} ({r['streaming_samples_per_s']:8.0f})  "
                  f"first batch {r['first_batch_s']:.2f} s")
        for k, v in entry["ratios"].items():
            print(f"  {k}: {v:.2f}")
    two = report["two_processes_one_cache"]
    print(f"\ntwo processes at once through one cache (+{two['latency_ms']} ms): fetched "
          f"{two['fetched_over_table']:.2f} x the table")
    peaks = [r["peak_rss_mb"] for e in report["latencies"].values() for n in ("voxlake, warm cache", "voxlake, filling the cache")
             for r in e["readers"][n]["runs"]]
    print(f"peak RSS with the cache on: {max(peaks):.0f} MB (budget 1024 MiB)")
    if args.out_json:
        with open(args.out_json, "w") as f:
            json.dump(report, f, indent=1)
    if args.out_png:
        plot(report, args.out_png)


if __name__ == "__main__":
    main()
