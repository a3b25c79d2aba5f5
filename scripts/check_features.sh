#!/usr/bin/env bash
# The suite builds the dependency tree three ways: its binaries (`cargo build --workspace
# --bins`), `cargo test --workspace --all-features` (dev-dependencies and tch too) and its wheel
# (voxlake-python alone). Where a crate outside voxlake gets other features in one of them, it
# and everything above it compile twice. crates/python/Cargo.toml turns on what the test build
# adds, and voxlake's crates forward `cloud` as their dependencies' `default` (Cargo.toml); this
# fails, naming the crate and the features, when the three part again.
set -euo pipefail
cd "$(dirname "$0")/.."

tree() { cargo tree --quiet --prefix none -f '{p} {f}' "$@" | sort -u; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
tree -e normal,build --workspace >"$dir/bins"
tree -e normal,build,dev --workspace --all-features >"$dir/test"
tree -e normal,build -p voxlake-python >"$dir/wheel"

python3 - "$dir" <<'PY'
import sys
from pathlib import Path

def features(path, ours):
    """Each crate (name, version) with the union of its features; voxlake's own if `ours`."""
    crates = {}
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) < 2 or (parts[0].startswith("voxlake") and not ours):
            continue
        found = crates.setdefault((parts[0], parts[1]), set())
        for word in parts[2:]:
            if not word.startswith("("):
                found.update(word.split(","))
    return crates

d = sys.argv[1]
# voxlake's own crates build with more features under test (tch, fault hooks), not in the wheel.
bins, wheel = features(f"{d}/bins", True), features(f"{d}/wheel", True)
test = features(f"{d}/test", False)
parted = []
for name, other in (("cargo test", test), ("the wheel", wheel)):
    for crate, feats in sorted(bins.items()):
        if crate in other and other[crate] != feats:
            parted.append(f"{crate[0]} {crate[1]}: the binaries' build has {sorted(feats)}, "
                          f"{name}'s {sorted(other[crate])}")
if parted:
    print("the suite's builds give these crates other features (each compiles twice with all "
          "above it; turn the features on in crates/python/Cargo.toml):", *parted, sep="\n  ",
          file=sys.stderr)
    sys.exit(1)
print(f"features: the binaries, cargo test and the wheel build {len(bins)} crates one way")
PY
