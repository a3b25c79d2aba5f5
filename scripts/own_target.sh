# Sourced by scripts/demo.sh and scripts/test.sh, after CARGO_TARGET_DIR is set. Clones share
# one target directory, and cargo knows our crates by their path inside the workspace and their
# files' times: a build another clone made after this clone's last edit looks fresh here though
# its sources differ (seen: the loader compiled against another clone's older plan crate). So
# when the clone that built last is another, this clone's sources are touched: cargo rebuilds
# voxlake's crates and keeps the dependencies it shares.
marker="$CARGO_TARGET_DIR/.voxlake-last-clone"
mkdir -p "$CARGO_TARGET_DIR"
if [ "$(cat "$marker" 2>/dev/null)" != "$PWD" ]; then
  find . \( -path ./.git -o -path ./.venv -o -path ./target -o -name node_modules \) -prune -o \
    -type f \( -name '*.rs' -o -name Cargo.toml -o -name '*.cpp' \) -print0 | xargs -0 -r touch
  echo "$PWD" >"$marker"
fi
