# Sourced by scripts/test.sh: cargo never deletes old test and example binaries (~0.5 GB each in
# debug), so a target directory shared across runs fills the disk. Deletes, in deps/ and
# examples/ of every profile (and of the wheel's target triple), binaries more than 15 minutes
# older than the newest of the same name (one build can hold several of a name: a lib's tests, a
# bin, the bin's tests).
for dir in "$CARGO_TARGET_DIR"/{,x86_64-unknown-linux-gnu/}{debug,release}/{deps,examples}; do
  [ -d "$dir" ] || continue
  find "$dir" -maxdepth 1 -type f -executable -printf '%T@ %p\n' | sort -rn | awk '
    { path = $2; name = path; sub(/.*\//, "", name); sub(/-[0-9a-f]{16}$/, "", name)
      if (!(name in newest)) newest[name] = $1
      else if ($1 < newest[name] - 900) print path }' | xargs -r rm -f
done
# Incremental state: one folder a crate and feature set, a new one each time either changes, none
# ever deleted (384 folders, 12 of a 30 GiB directory's GiB). Deleted: those more than an hour
# older than the newest of their crate (one run's builds of a crate lie within minutes).
for dir in "$CARGO_TARGET_DIR"/{,x86_64-unknown-linux-gnu/}{debug,release}/incremental; do
  [ -d "$dir" ] || continue
  find "$dir" -mindepth 1 -maxdepth 1 -type d -printf '%T@ %p\n' | sort -rn | awk '
    { path = $2; name = path; sub(/.*\//, "", name); sub(/-[0-9a-z]+$/, "", name)
      if (!(name in newest)) newest[name] = $1
      else if ($1 < newest[name] - 3600) print path }' | xargs -r rm -rf
done
# Libraries of older builds (other feature sets, other versions) and incremental state pile up
# too; past a cap the whole directory goes and the next build is a cold one.
cap_gib="${VOXLAKE_TARGET_CAP_GIB:-30}"
if [ -d "$CARGO_TARGET_DIR" ]; then
  used_gib=$(du -s --block-size=1G "$CARGO_TARGET_DIR" | cut -f1)
  if [ "$used_gib" -gt "$cap_gib" ]; then
    echo "target directory $CARGO_TARGET_DIR holds ${used_gib} GiB (cap ${cap_gib}): removing it" >&2
    rm -rf "$CARGO_TARGET_DIR"
  fi
fi
