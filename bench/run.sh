#!/usr/bin/env bash
# Foundation benchmarks (issue 2): starts a fresh kilnd for each group, runs kiln-loadgen and
# kiln-transfer against it over loopback, and writes bench/results/foundation.md.
#   bench/run.sh            uses build/ (BUILD=dir to change)
# Needs: build/server/kilnd, build/bench/kiln-loadgen, build/bench/kiln-transfer.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
kilnd=$build/server/kilnd
loadgen=$build/bench/kiln-loadgen
transfer=$build/bench/kiln-transfer
out=bench/results/foundation.md
for b in "$kilnd" "$loadgen" "$transfer"; do
  [ -x "$b" ] || { echo "run.sh: $b is missing; build first (ninja -C $build)" >&2; exit 2; }
done

# Other work on the machine skews every number below: record how busy it was.
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
work=$(mktemp -d /tmp/kiln-bench-XXXXXX)
pid=
stop_kilnd() {
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" || { echo "run.sh: kilnd exited with status $?" >&2; }
    pid=
  fi
}
trap 'stop_kilnd; rm -rf "$work"' EXIT

# Starts kilnd and sets TCP and UNIX from its --ready-fd lines: readiness is the daemon's own
# report, not a sleep. A fifo, so that a kilnd that dies early gives EOF instead of a hang.
start_kilnd() {
  rm -f "$work/ready" "$work/kiln.sock"
  mkfifo "$work/ready"
  "$kilnd" --listen tcp:127.0.0.1:0 --listen "unix:$work/kiln.sock" --ready-fd 3 \
    --cache-dir "$work/cache" --log-level warn 3>"$work/ready" 2>>"$work/kilnd.log" &
  pid=$!
  local lines
  lines=$(timeout 30 cat "$work/ready") || { echo "run.sh: kilnd did not start" >&2; exit 1; }
  TCP=$(grep '^tcp:' <<<"$lines")
  UNIX=$(grep '^unix:' <<<"$lines")
}

# Value of key=... in a loadgen/transfer result line.
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p; s/^$1=\([^ ]*\).*/\1/p" <<<"$2" | head -1; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
met() { if "$@"; then echo "met"; else echo "**not met**"; fi; }
# "met" when both transports meet the bar: both() CMP BAR TCP UNIX, CMP is ge or le.
le() { ge "$2" "$1"; }
both() { if "$1" "$3" "$2" && "$1" "$4" "$2"; then echo "met"; else echo "**not met**"; fi; }

echo "== sequential ping (1 connection, depth 1)" >&2
start_kilnd
"$loadgen" --url "$TCP" --requests 5000 >/dev/null # warm-up: caches, branch predictors
ping_tcp=$("$loadgen" --url "$TCP" --requests 100000)
ping_unix=$("$loadgen" --url "$UNIX" --requests 100000)
echo "$ping_tcp" >&2
echo "$ping_unix" >&2

echo "== pipelined ping (16 connections x depth 32)" >&2
pipe_tcp=$("$loadgen" --url "$TCP" --connections 16 --depth 32 --requests 2000000)
pipe_unix=$("$loadgen" --url "$UNIX" --connections 16 --depth 32 --requests 2000000)
echo "$pipe_tcp" >&2
echo "$pipe_unix" >&2

echo "== 256 MiB float32 upload + download" >&2
xfer_unix=$("$transfer" --url "$UNIX" --mib 256 --repeat 5)
xfer_tcp=$("$transfer" --url "$TCP" --mib 256 --repeat 5)
echo "$xfer_unix" >&2
echo "$xfer_tcp" >&2
stop_kilnd

echo "== resident memory after 10,000 and 1,000,000 requests (fresh kilnd)" >&2
start_kilnd
# Both phases mix pings with 4 KiB uploads (each freed right away), one in twenty.
"$loadgen" --url "$TCP" --connections 16 --depth 32 --requests 9500 >/dev/null
"$loadgen" --url "$UNIX" --connections 4 --depth 8 --method upload --size 4096 --requests 500 >/dev/null
rss_10k=$(rss_kib "$pid")
"$loadgen" --url "$TCP" --connections 16 --depth 32 --requests 940500 >/dev/null
"$loadgen" --url "$UNIX" --connections 4 --depth 8 --method upload --size 4096 --requests 49500 >/dev/null
rss_1m=$(rss_kib "$pid")
stop_kilnd
rss_growth=$(awk -v a="$rss_10k" -v b="$rss_1m" 'BEGIN { printf "%.1f", (b - a) * 100 / a }')
echo "RSS ${rss_10k} KiB -> ${rss_1m} KiB (${rss_growth}%)" >&2

p50_tcp=$(field p50_us "$ping_tcp"); p50_unix=$(field p50_us "$ping_unix")
rps_tcp=$(field req_per_s "$pipe_tcp"); rps_unix=$(field req_per_s "$pipe_unix")
up_unix=$(field upload_gbps_median "$xfer_unix"); down_unix=$(field download_gbps_median "$xfer_unix")
up_tcp=$(field upload_gbps_median "$xfer_tcp"); down_tcp=$(field download_gbps_median "$xfer_tcp")

mkdir -p bench/results
# A hand-written "## Analysis" section (why a bar is or is not met) survives re-runs.
analysis=
if [ -f "$out" ]; then analysis=$(sed -n '/^## Analysis/,$p' "$out"); fi
{
  echo "# Foundation benchmarks"
  echo
  echo "Written by \`bench/run.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'), kiln $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
  echo
  echo "Machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores," \
       "$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, Linux $(uname -r)."
  echo "Load average before the run: ${load_before}; after: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Client and daemon share the machine (loopback); the build is \`$(sed -n "s/^buildtype *= *//p" "$build/meson-private/cmd_line.txt" 2>/dev/null || echo default)\`."
  echo
  echo "| measurement | bar | tcp | unix | |"
  echo "|---|---|---|---|---|"
  echo "| \`ping\` round trip p50, 1 connection, sequential | <= 30 us | ${p50_tcp} us | ${p50_unix} us | $(both le 30 "$p50_tcp" "$p50_unix") |"
  echo "| pipelined \`ping\`, 16 connections x depth 32 | >= 200,000 req/s | ${rps_tcp} | ${rps_unix} | $(both ge 200000 "$rps_tcp" "$rps_unix") |"
  echo "| \`upload\` 256 MiB float32 (median of 5) | >= 2 GB/s | ${up_tcp} GB/s | ${up_unix} GB/s | $(both ge 2 "$up_tcp" "$up_unix") |"
  echo "| \`download\` 256 MiB float32 (median of 5) | >= 2 GB/s | ${down_tcp} GB/s | ${down_unix} GB/s | $(both ge 2 "$down_tcp" "$down_unix") |"
  echo "| kilnd RSS after 1,000,000 vs 10,000 requests | within 5% | ${rss_10k} -> ${rss_1m} KiB | | ${rss_growth}% $(met awk -v g="$rss_growth" 'BEGIN { exit !(g <= 5 && g >= -5) }') |"
  echo
  echo "Raw result lines:"
  echo
  echo '```'
  printf '%s\n' "ping tcp:  $ping_tcp" "ping unix: $ping_unix" "pipe tcp:  $pipe_tcp" \
    "pipe unix: $pipe_unix" "xfer unix: $xfer_unix" "xfer tcp:  $xfer_tcp"
  echo '```'
  if [ -n "$analysis" ]; then
    echo
    printf '%s\n' "$analysis"
  fi
} >"$out"
echo "wrote $out" >&2
