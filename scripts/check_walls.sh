#!/usr/bin/env bash
# The walls between voxlake's crates and files (docs/architecture.md), checked so they cannot
# erode silently: scripts/test.sh runs this before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "walls: $*" >&2; exit 1; }

# voxlake-plan is std only: its normal dependency tree is itself.
plan=$(cargo tree -p voxlake-plan -e normal --prefix none)
[ "$(echo "$plan" | grep -cv '^voxlake-plan ')" -eq 0 ] || fail "voxlake-plan depends on more than std: $plan"

# voxlake-io knows nothing of Delta, with or without the cloud stores.
for features in "" "--no-default-features"; do
  io=$(cargo tree -p voxlake-io -e normal --prefix none $features)
  if echo "$io" | grep -qE '^(deltalake|deltalake-core|buoyant_kernel) '; then
    fail "voxlake-io $features depends on Delta: $(echo "$io" | grep -E '^(deltalake|buoyant)' | sort -u)"
  fi
done
# Nor does its code name Delta's rules (the log's files, deltalake's types): those are
# voxlake-delta's. Comments and tests may say what the bytes are for.
python3 - <<'PY' || fail "voxlake-io's code names Delta (move it to voxlake-delta)"
import pathlib, re, sys
tests = re.compile(r"^#\[cfg\(test\)\]\s*\n\s*mod tests\b", re.M)
found = []
for f in sorted(pathlib.Path("crates/io/src").rglob("*.rs")):
    text = f.read_text()
    m = tests.search(text)
    code = text[: m.start()] if m else text
    for n, line in enumerate(code.splitlines(), 1):
        if not line.strip().startswith("//") and re.search(r"(?i)delta", line):
            found.append(f"{f}:{n}: {line.strip()}")
print("\n".join(found), file=sys.stderr)
sys.exit(1 if found else 0)
PY
# Without the cloud stores voxlake-io builds no TLS stack and no HTTP client.
io=$(cargo tree -p voxlake-io -e normal --prefix none --no-default-features)
if echo "$io" | grep -qE '^(rustls|aws-lc-sys|reqwest) '; then
  fail "voxlake-io without cloud builds $(echo "$io" | grep -E '^(rustls|aws-lc-sys|reqwest) ' | sort -u | tr '\n' ' ')"
fi

# The arrows point down: format ← io ← delta ← table ← stream ← loader, plan ← stream.
direct() { cargo tree -p "$1" -e normal --depth 1 --prefix none | tail -n +2 | awk '{print $1}'; }
forbid() {
  local crate=$1; shift
  local deps; deps=$(direct "$crate")
  for up in "$@"; do
    if echo "$deps" | grep -qx "$up"; then fail "$crate depends on $up, a layer above it"; fi
  done
}
forbid voxlake-format voxlake-io voxlake-delta voxlake-table voxlake-stream voxlake-loader voxlake-compact
forbid voxlake-io voxlake-delta voxlake-table voxlake-stream voxlake-loader voxlake-compact voxlake-plan
# The log reads no data: voxlake-delta never imports the table, nor anything above it.
forbid voxlake-delta voxlake-table voxlake-stream voxlake-loader voxlake-compact voxlake-plan
forbid voxlake-table voxlake-stream voxlake-loader voxlake-compact voxlake-plan
forbid voxlake-stream voxlake-loader voxlake-compact
forbid voxlake-loader voxlake-compact
# The copy kernels are pure: no voxlake crate, no store, no runtime.
kernels=$(direct voxlake-kernels)
[ "$(echo "$kernels" | grep -cvxE 'half|rayon')" -eq 0 ] || fail "voxlake-kernels depends on more than half and rayon: $kernels"

# The loader names plan where it uses it, not through stream's re-exports.
if grep -rnE 'voxlake_stream::(resume|replay|order|affinity|mixer|plan|Shard)\b' crates/loader/src; then
  fail "the loader reaches plan through voxlake_stream: use voxlake_plan"
fi

# The stream re-exports nothing of the crates below it: one path to each item.
if grep -nE '^pub use voxlake_(io|delta|table|plan|format)' crates/stream/src/lib.rs; then
  fail "voxlake-stream re-exports a crate below it: use the item's own path"
fi

# The libraries build no command line: argument parsing and progress bars are voxlake-cli's,
# and so is the log subscriber (which the Delta kernel deltalake builds brings along anyway:
# only a direct dependency on it is refused; the loader's trace, `loader/src/trace.rs`, builds
# a registry of its own from it, and installs no subscriber).
for lib in voxlake-compact voxlake-loader voxlake; do
  tree=$(cargo tree -p "$lib" -e normal --prefix none)
  direct=$(cargo tree -p "$lib" -e normal --prefix none --depth 1)
  if [ "$lib" = voxlake-loader ]; then direct=""; fi
  if echo "$tree" | grep -qE '^(clap|indicatif) ' || echo "$direct" | grep -qE '^tracing-subscriber '; then
    fail "$lib depends on a command-line crate: $(echo "$tree" | grep -E '^(clap|indicatif|tracing-subscriber) ' | sort -u | tr '\n' ' ')(those are voxlake-cli's)"
  fi
done
# No library installs a subscriber: the process's logging is the application's.
if grep -rnE 'set_global_default|\.try_init\(\)|\.init\(\)|tracing_subscriber::fmt' crates/{format,plan,io,delta,table,stream,kernels,compact,loader}/src src 2>/dev/null; then
  fail "a library installs a tracing subscriber (the application's to choose)"
fi

# One public path to each item: no library crate re-exports another voxlake crate's item (the
# facade alone gathers them), nor another crate's item but in the hidden module its macros
# name (`__private`); the loader's `pub use tch` hands users the tch its tensors are of.
python3 - <<'PY' || fail "an item re-exported under a second public path: use its own crate's path"
import pathlib, re, sys
bad = []
ours = re.compile(r"^\s*pub use voxlake_\w+")
external = re.compile(r"^\s*pub use (object_store|deltalake\w*|arrow\w*|parquet|tokio|async_trait|futures)\b")
for path in sorted(pathlib.Path("crates").glob("*/src/**/*.rs")):
    if path.parts[1] in ("python", "testkit"):
        continue
    hidden = None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = re.match(r"^(\s*)pub mod __private \{", line)
        if m:
            hidden = m.group(1) + "}"
            continue
        if hidden is not None and line == hidden:
            hidden = None
        if ours.match(line) or (hidden is None and external.match(line)):
            bad.append(f"{path}:{n}: {line.strip()}")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PY
# Resume arithmetic lives once, in Rust (voxlake_loader::workers): the Python package reads and
# writes no state's segment keys.
if grep -nE "[\"'](closed|ahead|batches)[\"']" python/voxlake/*.py; then
  fail "python/voxlake reads or writes a state's segment keys: ask the extension (voxlake_loader::workers)"
fi
# No file of crates/*/src imports a file that imports it; none has over 500 lines before its tests.
python3 scripts/check_layers.py
python3 scripts/file_sizes.py --over 500 || fail "files over 500 lines of non-test code (one job per file: split them)"
# docs/benchmarks.md answers questions, each with its command and table: a notebook grows past 500.
lines=$(wc -l < docs/benchmarks.md)
[ "$lines" -le 500 ] || fail "docs/benchmarks.md has $lines lines (500 at most: figures, not a lab notebook)"
# No crate holds over 22 % of the code: one that grows past it holds more than one job.
python3 scripts/file_sizes.py --crate-share 22 || fail "a crate holds over 22 % of the code: split it along its jobs"
echo "walls: plan is std only, io has no Delta, the crates' arrows point down, none over 22 %"
