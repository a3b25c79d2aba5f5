# Sourced by the benchmark scripts: `machine` prints, in one line, what makes one machine's
# local reads unlike another's (issue 63): the kernel, the CPU and its cores, the memory, the
# transparent huge page mode, and whether DAMON's kdamond (memory tiering, reclaim) runs.
# The share of a table's pages in huge folios is the scripts' own (it depends on the files).
machine() {
  local cpu cores mem thp damon
  cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null)
  cores=$(nproc)
  mem=$(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo 2>/dev/null)
  thp=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)
  if pgrep -x 'kdamond.*' >/dev/null 2>&1 || pgrep kdamond >/dev/null 2>&1; then damon=running; else damon=off; fi
  echo "machine: kernel $(uname -r), ${cpu:-unknown CPU} x $cores, $mem, THP ${thp:-unknown}, kdamond $damon"
}
