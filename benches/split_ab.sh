#!/usr/bin/env bash
# Two `voxlake` binaries on one local table, alternated in one run (the machine's noise hits
# both alike): `voxlake bench TABLE --shuffle --seed 1 --epochs E --json`, ROUNDS rounds of A
# then B (then B then A, alternating who goes first). Prints each run's samples/s and the
# ratio of B's median to A's. Used for issue 27 (the crate split): A = before, B = after.
#   benches/split_ab.sh A_BIN B_BIN TABLE [ROUNDS] [EPOCHS]
set -euo pipefail
a=$1 b=$2 table=$3 rounds=${4:-5} epochs=${5:-3}
# samples/s and CPU seconds (user + system) per 1,000 samples, as "RATE,CPU".
run() { "$1" bench "$table" --shuffle --seed 1 --epochs "$epochs" --json 2>/dev/null |
  python3 -c 'import json,sys; d=json.load(sys.stdin); cpu=1000*(d["cpu_user_s"]+d["cpu_system_s"])/d["samples"]; print("%.0f,%.4f" % (d["samples_per_s"], cpu))'; }
as=() bs=()
for ((i = 0; i < rounds; i++)); do
  if ((i % 2 == 0)); then as+=("$(run "$a")"); bs+=("$(run "$b")");
  else bs+=("$(run "$b")"); as+=("$(run "$a")"); fi
  echo "round $i: A ${as[-1]}, B ${bs[-1]} (samples/s,CPU s per 1,000 samples)"
done
python3 - "${as[*]}" "${bs[*]}" <<'PY'
import statistics, sys
a = [tuple(map(float, x.split(","))) for x in sys.argv[1].split()]
b = [tuple(map(float, x.split(","))) for x in sys.argv[2].split()]
ma, mb = (statistics.median(r for r, _ in v) for v in (a, b))
ca, cb = (statistics.median(c for _, c in v) for v in (a, b))
print(f"median A {ma:.0f} samples/s, B {mb:.0f} samples/s, B/A {mb / ma:.3f}")
print(f"median CPU per 1,000 samples: A {ca:.3f} s, B {cb:.3f} s, B/A {cb / ca:.3f}")
print("per-round B/A: " + " ".join(f"{y[0] / x[0]:.2f}" for x, y in zip(a, b)))
PY
