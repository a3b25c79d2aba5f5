"""voxlake.torch.MapDataset on S3 through a latency proxy (benches/take/remote.sh starts both).

usage: remote.py --table DIR --upload URL --endpoint URL [--singles K=200] [--batch B=256]
                 [--batches N=6]

Uploads the local table DIR (its files as they are) to s3://bench/take, then through the proxy
at `--endpoint`: `ds[i]` for K random indices (each call's wall time: p50, p99) and N takes of B
random indices as batches (`ds[list]`: samples/s), from a dataset made once (its footers and
ids read before the timing).
"""

import argparse
import concurrent.futures as cf
import os
import random
import statistics
import time

import boto3

KEYS = {"aws_access_key_id": "voxlake", "aws_secret_access_key": "voxlake-secret"}


def upload(url: str, table: str) -> None:
    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                          config=boto3.session.Config(max_pool_connections=32), **KEYS)
    try:
        client.create_bucket(Bucket="bench")
    except client.exceptions.BucketAlreadyOwnedByYou:
        pass
    files = []
    for root, _, names in os.walk(table):
        for n in names:
            path = os.path.join(root, n)
            files.append((path, "take/" + os.path.relpath(path, table)))
    with cf.ThreadPoolExecutor(32) as ex:
        list(ex.map(lambda f: client.upload_file(f[0], "bench", f[1]), files))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", required=True)
    ap.add_argument("--upload", required=True)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--singles", type=int, default=200)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=6)
    args = ap.parse_args()
    upload(args.upload, args.table)
    os.environ.update({"AWS_ENDPOINT_URL": args.endpoint, "AWS_ALLOW_HTTP": "true",
                       "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": KEYS["aws_access_key_id"],
                       "AWS_SECRET_ACCESS_KEY": KEYS["aws_secret_access_key"]})
    from voxlake.torch import MapDataset
    ds = MapDataset("s3://bench/take")
    rng = random.Random(5)
    ds[[rng.randrange(len(ds)) for _ in range(args.batch)]]  # footers read, outside the timing
    times = []
    for _ in range(args.singles):
        i = rng.randrange(len(ds))
        t = time.perf_counter()
        ds[i]
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"ds[i] through the proxy: p50 {1e3 * times[len(times) // 2]:.1f} ms, "
          f"p99 {1e3 * times[int(len(times) * 0.99)]:.1f} ms ({args.singles} random indices)")
    rates = []
    for _ in range(args.batches):
        idx = [rng.randrange(len(ds)) for _ in range(args.batch)]
        t = time.perf_counter()
        ds[idx]
        rates.append(args.batch / (time.perf_counter() - t))
    print(f"{args.batch} random indices a take: median {statistics.median(rates):.0f} samples/s "
          f"(of {args.batches}: {', '.join(f'{r:.0f}' for r in rates)})")


if __name__ == "__main__":
    main()
