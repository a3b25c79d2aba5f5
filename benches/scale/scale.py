"""Issue 30's measurements as a benchmark (run by benches/scale/run.sh, which starts the store and
builds the binaries): a Delta table of FILES one-row files in voxlake's layout (tensors of 8
f32), written with pyarrow, its log in COMMITS commits, in an S3 store on 127.0.0.1 behind
latency proxies that hold every request LATENCY ms and log it. 1 and 8 `voxlake bench`
processes of one node open it at once and stop after their first batch, without and with a
node cache (a fresh one per run); first without a checkpoint, then with one written by
deltalake-python; then a log of LONG_COMMITS one-file commits without a checkpoint.

Reported per run (the node): requests by kind as the proxy saw them, log bytes fetched, the
slowest process's first batch, that time over the latency, the sequential round trips (the
longest chain of requests each asked after the one before was answered, from the proxy's log)
of the open (those asked before the first data read, and that read) and to the first batch,
the largest peak RSS.

usage: scale.py --voxlake BIN --proxy BIN --s3 URL --bucket B [--files 100000] [--commits 100]
                [--long-commits 10000] [--latency-ms 20] [--out-json F]
"""

import argparse
import concurrent.futures as cf
import io
import json
import os
import re
import subprocess
import tempfile
import time

import boto3
import pyarrow as pa
import pyarrow.parquet as pq

KEYS = {"aws_access_key_id": "voxlake", "aws_secret_access_key": "voxlake-secret"}
SHAPE = [8]
CONFIG = {
    "delta.dataSkippingStatsColumns": "id,label",
    "voxlake.format.version": "1",
    "voxlake.tensor.byteOrder": "little",
    "voxlake.tensor.dtype": "f32",
    "voxlake.tensor.order": "C",
    "voxlake.tensor.shape": json.dumps(SHAPE, separators=(",", ":")),
}


def client(url: str):
    config = boto3.session.Config(max_pool_connections=64, retries={"max_attempts": 10, "mode": "standard"})
    return boto3.client("s3", endpoint_url=url, region_name="us-east-1", config=config, **KEYS)


def storage_options(url: str) -> dict:
    return {"AWS_ENDPOINT_URL": url, "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": KEYS["aws_access_key_id"], "AWS_SECRET_ACCESS_KEY": KEYS["aws_secret_access_key"],
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}


def one_row_file(i: int) -> bytes:
    meta = {k: v for k, v in CONFIG.items() if k.startswith("voxlake.")}
    schema = pa.schema([
        pa.field("id", pa.string(), nullable=False),
        pa.field("label", pa.int64()),
        pa.field("tensor", pa.binary(), nullable=False, metadata=meta),
    ])
    tensor = bytes(range(i % 200, i % 200 + 4 * SHAPE[0]))
    table = pa.table({"id": [f"row_{i:07}"], "label": [i % 2], "tensor": [tensor]}, schema=schema)
    out = io.BytesIO()
    pq.write_table(table, out, write_statistics=["id", "label"])
    return out.getvalue()


def write_table(s3, bucket: str, prefix: str, files: int, commits: int) -> None:
    """FILES one-row files and a log of COMMITS commits (after the metadata's), no checkpoint."""
    sizes = {}

    def put(i: int):
        body = one_row_file(i)
        s3.put_object(Bucket=bucket, Key=f"{prefix}/part-{i:07}.parquet", Body=body)
        sizes[i] = len(body)

    with cf.ThreadPoolExecutor(32) as ex:
        list(ex.map(put, range(files)))
    schema = {"type": "struct", "fields": [
        {"name": "id", "type": "string", "nullable": False, "metadata": {}},
        {"name": "label", "type": "long", "nullable": True, "metadata": {}},
        {"name": "tensor", "type": "binary", "nullable": False,
         "metadata": {k: v for k, v in CONFIG.items() if k.startswith("voxlake.")}},
    ]}
    now = int(time.time() * 1000)
    first = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {"metaData": {"id": "00000000-0000-0000-0000-00000000000" + str(commits % 10), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps(schema), "partitionColumns": [], "createdTime": now,
                      "configuration": CONFIG}},
    ]
    per = -(-files // commits)

    def commit(v: int):
        lines = first if v == 0 else []
        if v > 0:
            for i in range((v - 1) * per, min(v * per, files)):
                stats = {"numRecords": 1, "minValues": {"id": f"row_{i:07}", "label": i % 2},
                         "maxValues": {"id": f"row_{i:07}", "label": i % 2}, "nullCount": {"id": 0, "label": 0}}
                lines = lines + [{"add": {"path": f"part-{i:07}.parquet", "partitionValues": {}, "size": sizes[i],
                                          "modificationTime": now + i, "dataChange": True, "stats": json.dumps(stats)}}]
        body = "\n".join(json.dumps(line) for line in [{"commitInfo": {"timestamp": now, "operation": "WRITE"}}] + lines)
        s3.put_object(Bucket=bucket, Key=f"{prefix}/_delta_log/{v:020}.json", Body=body.encode())

    with cf.ThreadPoolExecutor(32) as ex:
        list(ex.map(commit, range(commits + 1)))


def log_sizes(s3, bucket: str, prefix: str) -> dict:
    sizes = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/_delta_log/"):
        for o in page.get("Contents", []):
            sizes[o["Key"]] = o["Size"]
    return sizes


def kind(method: str, target: str) -> str:
    if "list-type=2" in target:
        return "LIST"
    if "_last_checkpoint" in target:
        return "GET _last_checkpoint"
    if "_voxlake/jobs" in target:
        return f"{method} job marker"
    if "_delta_log/" in target and ".json" in target:
        return f"{method} commit"
    if "_delta_log/" in target and "checkpoint" in target:
        return f"{method} checkpoint"
    if target.split("?")[0].endswith(".parquet"):
        return f"{method} data"
    return f"{method} other"


def measure(args, proxy_bin: str, table: str, bucket: str, prefix: str, procs: int, cache: bool, sizes: dict) -> dict:
    work = tempfile.mkdtemp(prefix="voxlake-scale-")
    log = os.path.join(work, "requests.log")
    out = open(os.path.join(work, "proxy.out"), "w+")
    port = args.s3.rsplit(":", 1)[1]
    proxy = subprocess.Popen([proxy_bin, f"127.0.0.1:{port}", "--latency-ms", str(args.latency_ms), "--log", log],
                             stdout=out, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            out.seek(0)
            m = re.search(r"listening on (\S+)", out.read())
            if m:
                break
            time.sleep(0.05)
        env = {**os.environ, **storage_options(f"http://{m.group(1)}")}
        job = f"scale-{os.getpid()}-{time.time_ns()}"
        runs = []
        launched = time.time()
        for rank in range(procs):
            cmd = [args.voxlake, "bench", table, "--json", "--stop-after", "1", "--batch-size", "32",
                   "--rank", str(rank), "--world-size", str(procs), "--job", job]
            cmd += ["--cache-dir", os.path.join(work, "cache"), "--cache-max-mb", "4096"] if cache else ["--no-cache"]
            runs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        results = []
        for r in runs:
            stdout, stderr = r.communicate()
            if r.returncode != 0:
                raise SystemExit(f"bench failed: {stderr}")
            results.append(json.loads(stdout))
    finally:
        proxy.terminate()  # it writes out its log first
        proxy.wait()
    kinds, log_bytes, spans, first_data = {}, 0, [], None
    first = max(r["first_batch_s"] for r in results)
    for line in open(log):
        at, answered, method, target, rng = line.rstrip("\n").split(" ", 4)
        k = kind(method, target)
        if answered != "-":
            spans.append((int(at), int(answered)))
        if k == "GET data" and first_data is None:
            first_data = int(at)
        kinds[k] = kinds.get(k, 0) + 1
        if method == "GET" and "_delta_log/" in target and "list-type" not in target:
            key = target.split("?")[0].lstrip("/").split("/", 1)[1]
            m = re.match(r"bytes=(\d+)-(\d+)", rng)
            log_bytes += int(m.group(2)) - int(m.group(1)) + 1 if m else sizes.get(key, 0)
    return {
        "processes": procs, "cache": cache, "requests": sum(kinds.values()), "by_kind": kinds,
        "log_bytes": log_bytes, "slowest_first_batch_s": round(first, 3),
        "first_batch_over_latency": round(first * 1000 / args.latency_ms, 1),
        "sequential_round_trips": sequential(spans, (launched + first) * 1000),
        # The open's share: those asked before the first data read, and that read.
        "open_round_trips": sequential([s for s in spans if s[0] < first_data], float("inf")) + 1
        if first_data is not None else None,
        "peak_rss_mb": round(max(r["peak_rss_bytes"] or 0 for r in results) / 1e6, 1),
        # Each process's peak, smallest first: the ranks that read the node's kept list beside
        # the one that replayed the log.
        "peak_rss_mb_each": sorted(round((r["peak_rss_bytes"] or 0) / 1e6, 1) for r in results),
    }


def sequential(spans: list, until_ms: float) -> int:
    """The longest chain of requests answered by `until_ms` (the slowest first batch), each asked
    after the one before it was answered: the round trips that could not overlap, whatever CPU
    time lay between them (the greedy pick by earliest answer finds the longest such chain)."""
    chain, free = 0, 0
    for at, answered in sorted(spans, key=lambda s: s[1]):
        if answered > until_ms + 1:
            break
        if at >= free:
            chain, free = chain + 1, answered
    return chain


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--voxlake", required=True)
    p.add_argument("--proxy", required=True)
    p.add_argument("--s3", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--files", type=int, default=100_000)
    p.add_argument("--commits", type=int, default=100)
    p.add_argument("--long-commits", type=int, default=10_000)
    p.add_argument("--latency-ms", type=int, default=20)
    p.add_argument("--out-json")
    p.add_argument("--only-commits", action="store_true", help="only the log of one-file commits")
    args = p.parse_args()
    s3 = client(args.s3)
    try:
        s3.create_bucket(Bucket=args.bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    rows = []
    prefix = f"files{args.files}"
    t0 = time.time()
    if not args.only_commits:
        write_table(s3, args.bucket, prefix, args.files, args.commits)
        print(f"wrote {args.files} files in {args.commits} commits in {time.time() - t0:.0f} s", flush=True)
    table = f"s3://{args.bucket}/{prefix}"
    for checkpoint in ([] if args.only_commits else [False, True]):
        if checkpoint:
            from deltalake import DeltaTable
            DeltaTable(table, storage_options=storage_options(args.s3)).create_checkpoint()
        sizes = log_sizes(s3, args.bucket, prefix)
        for procs in [1, 8]:
            for cache in [False, True]:
                r = measure(args, args.proxy, table, args.bucket, prefix, procs, cache, sizes)
                r.update({"table": f"{args.files} files, {args.commits} commits", "checkpoint": checkpoint})
                print(json.dumps(r), flush=True)
                rows.append(r)
    prefix = f"commits{args.long_commits}"
    t0 = time.time()
    if args.long_commits == 0:
        return report(rows, args.out_json)
    write_table(s3, args.bucket, prefix, args.long_commits, args.long_commits)
    print(f"wrote {args.long_commits} one-file commits in {time.time() - t0:.0f} s", flush=True)
    sizes = log_sizes(s3, args.bucket, prefix)
    for procs in [1, 8]:
        for cache in [False, True]:
            r = measure(args, args.proxy, f"s3://{args.bucket}/{prefix}", args.bucket, prefix, procs, cache, sizes)
            r.update({"table": f"{args.long_commits} one-file commits", "checkpoint": False})
            print(json.dumps(r), flush=True)
            rows.append(r)
    report(rows, args.out_json)


def median(row: dict):
    each = row.get("peak_rss_mb_each") or [row["peak_rss_mb"]]
    return each[len(each) // 2]


def report(rows: list, out_json) -> None:
    print()
    print("| table | checkpoint | processes | cache | requests | log GETs (commit / checkpoint / LIST) | data GETs | log MB | slowest first batch (s) | ÷ latency | sequential round trips: open / to the first batch | peak RSS (MB): largest / median |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        k = r["by_kind"]
        print(f"| {r['table']} | {'yes' if r['checkpoint'] else 'no'} | {r['processes']} | {'node cache' if r['cache'] else 'none'} | "
              f"{r['requests']} | {k.get('GET commit', 0)} / {k.get('GET checkpoint', 0)} / {k.get('LIST', 0)} | {k.get('GET data', 0)} | "
              f"{r['log_bytes'] / 1e6:.1f} | {r['slowest_first_batch_s']} | {r['first_batch_over_latency']} | {r.get('open_round_trips')} / {r['sequential_round_trips']} | {r['peak_rss_mb']} / {median(r)} |")
    if out_json:
        with open(out_json, "w") as f:
            json.dump(rows, f, indent=1)

if __name__ == "__main__":
    main()
