#!/usr/bin/env bash
# The local path against the page cache (issue 44): `cat` of a table's files (one process) and
# `voxlake bench TABLE --shuffle` with row checksums verified (the default), without them, and
# without reading the values, alternated for ROUNDS rounds; each as GB/s of the files' bytes
# read and as a fraction of `cat`'s GB/s in the same round.
# The page cache's folios weigh on both (a mapped read fills a page table entry per 4 KiB page
# but one per 2 MiB huge folio): the share of the table's pages in huge folios is printed. With
# EVICT=1 the table's pages are dropped from the page cache first and read back by one untimed
# voxlake epoch, as a job's first epoch reads them from disk.
# PERF_STAT=1 then runs each (cat and the three epochs) once more under `perf stat` (software
# events, which a VM without hardware counters still has): CPU ms, user and system seconds,
# page faults, context switches.
#   benches/local/vs_cat.sh [TABLE=the 4,000-cube demo table] [ROUNDS=5]   (BIN: release binaries)
set -euo pipefail
cd "$(dirname "$0")/../.."
source benches/release_bins.sh
source benches/machine.sh
table=${1:-}
if [ -z "$table" ]; then
  data="${VOXLAKE_BENCH_DIR:-$HOME/.cache/voxlake/bench}/demo4000"
  [ -d "$data/table/_delta_log" ] || "$bin/compact" demo --dir "$data" --count 4000 >/dev/null
  table=$data/table
fi
rounds=${2:-5}
files=("$table"/*.parquet)
bytes=$(du -cb "${files[@]}" | tail -1 | cut -f1)
if [ "${EVICT:-0}" = 1 ]; then
  python3 - "${files[@]}" <<'PY'
import os, sys
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PY
  "$bin/voxlake" bench "$table" --shuffle --seed 1 >/dev/null 2>&1
else
  cat "${files[@]}" >/dev/null
fi
huge_share() { # the share of the files' pages that a mapping maps 2 MiB at a time (Linux)
  python3 - "${files[@]}" <<'PY'
import mmap, os, sys
total = huge = 0
for f in sys.argv[1:]:
    with open(f, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        m = mmap.mmap(fh.fileno(), size, prot=mmap.PROT_READ)
        m.madvise(22)  # MADV_POPULATE_READ
        smaps = open("/proc/self/smaps").read()
        at = smaps.find(os.path.realpath(f))
        for line in smaps[at:].splitlines()[1:40]:
            if line.startswith("FilePmdMapped:"):
                huge += int(line.split()[1])
                break
        total += size // 1024
        m.close()
print("%.2f" % (huge / max(total, 1)))
PY
}
machine
echo "page cache: $(huge_share) of the table's pages in huge folios"
gbps() { # extra bench arguments; prints tensor GB/s
  "$bin/voxlake" bench "$table" --shuffle --seed 1 --json "$@" 2>/dev/null |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.2f" % (d["bytes_read"] / d["seconds"] / 1e9))'
}
echo "table: $table, $((bytes / 1000000)) MB in ${#files[@]} files"
for ((i = 0; i < rounds; i++)); do
  t0=$(date +%s.%N)
  cat "${files[@]}" >/dev/null
  t1=$(date +%s.%N)
  cat_gbps=$(awk "BEGIN {printf \"%.2f\", $bytes / ($t1 - $t0) / 1e9}")
  verified=$(gbps)
  unverified=$(gbps --no-verify)
  untouched=$(gbps --no-touch)
  ratio() { awk "BEGIN {printf \"%.2f\", $1 / $cat_gbps}"; }
  echo "round $i: cat $cat_gbps GB/s; bench verified $verified ($(ratio "$verified")), --no-verify $unverified ($(ratio "$unverified")), --no-touch $untouched ($(ratio "$untouched"))"
done
if [ "${PERF_STAT:-0}" = 1 ]; then
  stat() { # label, command...: one line of the command's counts (perf stat) and CPU split
    python3 - "$@" <<'PY'
import os, resource, subprocess, sys, tempfile
label, command = sys.argv[1], sys.argv[2:]
fd, out = tempfile.mkstemp()
os.close(fd)
subprocess.run(["perf", "stat", "-x,", "-e", "task-clock,page-faults,context-switches", "-o", out,
                "--", *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
counts = {}
for line in open(out):
    parts = line.strip().split(",")
    if len(parts) > 2 and parts[2]:
        try:
            counts[parts[2]] = float(parts[0])
        except ValueError:
            pass
os.remove(out)
print(f"perf {label}: CPU {counts.get('task-clock', 0):.0f} ms (user {usage.ru_utime:.2f} s, system "
      f"{usage.ru_stime:.2f} s), page faults {counts.get('page-faults', 0):.0f}, context switches "
      f"{counts.get('context-switches', 0):.0f}")
PY
  }
  stat cat cat "${files[@]}"
  stat verified "$bin/voxlake" bench "$table" --shuffle --seed 1
  stat no-verify "$bin/voxlake" bench "$table" --shuffle --seed 1 --no-verify
  stat no-touch "$bin/voxlake" bench "$table" --shuffle --seed 1 --no-touch
fi
