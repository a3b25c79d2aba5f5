"""How a rare class's repeats spread over an epoch under `balance=label` (issue 58): TABLE's
negatives and POSITIVES of its positive rows (a filter keeps them), balanced, so each positive
is drawn about N/(2·POSITIVES) times an epoch; batches of 32, the default shuffle buffer. Prints
the median span, in batches, between the first and the last copy of a positive against what
independent draws over the epoch give (a draw's place uniform over the epoch's batches), and
the median gap between consecutive copies.

    python3 benches/sampling/repeats.py VOXLAKE_BIN TABLE LABELS_CSV [POSITIVES=20]
"""

import csv
import json
import random
import statistics
import subprocess
import sys
import tempfile


def main() -> None:
    binary, table, labels = sys.argv[1], sys.argv[2], sys.argv[3]
    n_pos = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    rows = list(csv.DictReader(open(labels)))
    pos = [r["file"] for r in rows if r["label"] == "1"][:n_pos]
    keep = "label = 0 OR id IN (" + ", ".join(f"'{p}'" for p in pos) + ")"
    with tempfile.NamedTemporaryFile("r") as ids_file:
        out = subprocess.run([binary, "bench", table, "--shuffle", "--seed", "1", "--balance", "label",
                              "--filter", keep, "--json", "--ids-out", ids_file.name],
                             check=True, capture_output=True, text=True).stdout
        ids = ids_file.read().split()
    json.loads(out.strip().splitlines()[-1])
    batches = len(ids) // 32 + (len(ids) % 32 > 0)
    spans, gaps, uniform = [], [], []
    rng = random.Random(0)
    for p in pos:
        at = [i // 32 for i, x in enumerate(ids) if x == p]
        spans.append(at[-1] - at[0])
        gaps += [b - a for a, b in zip(at, at[1:])]
        independent = sorted(rng.randrange(batches) for _ in at)
        uniform.append(independent[-1] - independent[0])
    print(f"{len(ids)} draws in {batches} batches, {len(ids) / 2 / len(pos):.0f} copies a positive: span of a "
          f"positive's copies median {statistics.median(spans)} batches (independent draws: "
          f"{statistics.median(uniform)}); gap between copies median {statistics.median(gaps)} batches")


if __name__ == "__main__":
    main()
