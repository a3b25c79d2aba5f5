"""Two `voxlake` builds alternated on one store (benches/scale/alternate.sh starts it): the
opening of a log of 10^4 one-file commits without a checkpoint, of a table of 10^4 one-row files
in 100 commits before and after a checkpoint (deltalake-python), each through the latency proxy
(one process, no node cache, `--stop-after 1`), and of the 10^4-commit log from local disk.
Prints one JSON line per run (first batch, requests by kind, sequential round trips of the open
and to the first batch, peak RSS) and writes them all to --out-json.

usage: alternate.py --old BIN --new BIN --proxy BIN --s3 URL [--rounds 3] [--out-json F]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale  # noqa: E402

BUCKET = "alternate"


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("--old", "--new", "--proxy", "--s3"):
        p.add_argument(name, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--latency-ms", type=int, default=20)
    p.add_argument("--out-json")
    a = p.parse_args()
    s3 = scale.client(a.s3)
    try:
        s3.create_bucket(Bucket=BUCKET)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    t0 = time.time()
    scale.write_table(s3, BUCKET, "c10000", 10_000, 10_000)
    scale.write_table(s3, BUCKET, "f10000", 10_000, 100)
    print(f"wrote the tables in {time.time() - t0:.0f} s", flush=True)
    local = tempfile.mkdtemp(prefix="voxlake-alternate-")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="c10000/"):
        for o in page.get("Contents", []):
            path = os.path.join(local, o["Key"].split("/", 1)[1])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read())

    def through_store(binary: str, prefix: str, sizes: dict) -> dict:
        args = argparse.Namespace(voxlake=binary, s3=a.s3, latency_ms=a.latency_ms)
        return scale.measure(args, a.proxy, f"s3://{BUCKET}/{prefix}", BUCKET, prefix, 1, False, sizes)

    def from_disk(binary: str) -> float:
        out = subprocess.run([binary, "bench", local, "--json", "--stop-after", "1", "--no-cache"],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)["first_batch_s"]

    rows = []
    cases = [("10^4 one-file commits", "c10000", False), ("10^4 files in 100 commits", "f10000", False),
             ("10^4 files, checkpoint", "f10000", True)]
    for label, prefix, checkpoint in cases:
        if checkpoint:
            from deltalake import DeltaTable
            DeltaTable(f"s3://{BUCKET}/{prefix}", storage_options=scale.storage_options(a.s3)).create_checkpoint()
        sizes = scale.log_sizes(s3, BUCKET, prefix)
        for r in range(a.rounds):
            for name, binary in (("old", a.old), ("new", a.new)):
                m = through_store(binary, prefix, sizes)
                row = {"table": label, "build": name, "round": r, "first_batch_s": m["slowest_first_batch_s"],
                       "requests": m["requests"], "by_kind": m["by_kind"], "open_round_trips": m["open_round_trips"],
                       "round_trips": m["sequential_round_trips"], "peak_rss_mb": m["peak_rss_mb"]}
                print(json.dumps(row), flush=True)
                rows.append(row)
    for r in range(a.rounds):
        for name, binary in (("old", a.old), ("new", a.new)):
            row = {"table": "10^4 one-file commits, local disk", "build": name, "round": r,
                   "first_batch_s": from_disk(binary)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
