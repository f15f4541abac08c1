#!/usr/bin/env bash
# TCP beside TLS (issue 11 §8): one fresh kilnd listening on both, certificates made for the
# run (tests/server/make_pki.sh), kiln-tls-bench measuring both URLs round by round, and a
# section for this run (the machine, the date, the commit and the numbers) added at the top of
# bench/results/tls.md; the sections of earlier runs and the hand-written ones stay.
#   bench/tls_run.sh            uses build/ (BUILD=dir to change); ROUNDS=3;
#                               TLS_RESULTS=FILE writes there instead of bench/results/tls.md;
#                               KILN_TLS_THREADS=N sets kilnd's and the client's TLS threads
#                               (docs/operations.md "TLS"; 0: none)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
kilnd=$build/server/kilnd
bench=$build/bench/kiln-tls-bench
out=${TLS_RESULTS:-bench/results/tls.md}   # bench/gpu/run.sh writes elsewhere
rounds=${ROUNDS:-3}
for b in "$kilnd" "$bench"; do
  [ -x "$b" ] || { echo "tls_run.sh: $b is missing; build first (ninja -C $build)" >&2; exit 2; }
done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
work=$(mktemp -d /tmp/kiln-tls-bench-XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

sh tests/server/make_pki.sh "$work/pki"
mkfifo "$work/ready"
"$kilnd" --listen tcp:127.0.0.1:0 --listen tls:127.0.0.1:0 --tls-cert "$work/pki/server.pem" \
  --tls-key "$work/pki/server.key" --ready-fd 3 --cache-dir "$work/cache" --log-level warn \
  3>"$work/ready" 2>>"$work/kilnd.log" &
pid=$!
lines=$(timeout 30 cat "$work/ready") || { echo "tls_run.sh: kilnd did not start" >&2; exit 1; }
TCP=$(grep '^tcp:' <<<"$lines")
TLS=$(grep '^tls:' <<<"$lines")

cmd=("$bench" --url "$TCP" --url "$TLS" --rounds "$rounds" --pid "$pid")
echo "== ${cmd[*]}" >&2
results=$(KILN_TLS_CA="$work/pki/ca.pem" "${cmd[@]}" | tee /dev/stderr)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# Median over rounds of field F for measurement W on URL U.
median() {
  grep " url=$1 what=$2 " <<<"$results" | sed -n "s/.* $3=\([^ ]*\).*/\1/p" | sort -g |
    awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
ping_tcp=$(median "$TCP" ping p50_us); ping_tls=$(median "$TLS" ping p50_us)
p99_tcp=$(median "$TCP" ping p99_us); p99_tls=$(median "$TLS" ping p99_us)
rps_tcp=$(median "$TCP" pipeline req_per_s); rps_tls=$(median "$TLS" pipeline req_per_s)
up_tcp=$(median "$TCP" transfer upload_gbps); up_tls=$(median "$TLS" transfer upload_gbps)
down_tcp=$(median "$TCP" transfer download_gbps); down_tls=$(median "$TLS" transfer download_gbps)
cpu() { # U DIRECTION WHO
  median "$1" transfer "$2_cpu_s_per_gb_$3"
}
within() { awk -v r="$1" 'BEGIN { exit !(r <= 1.3) }' && echo "met" || echo "**not met**"; }
up_ratio=$(ratio "$up_tcp" "$up_tls"); down_ratio=$(ratio "$down_tcp" "$down_tls")

buildtype=$(meson introspect "$build" --buildoptions 2>/dev/null | /usr/bin/python3 -c \
  'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "buildtype"))' \
  2>/dev/null || echo unknown)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
cores=$(nproc)
threads=${KILN_TLS_THREADS:-$(( cores / 4 < 3 ? cores / 4 : 3 ))}
section=$(mktemp)
{
  echo "## $(date -u '+%Y-%m-%d %H:%M UTC'), $cores cores, kiln $(git rev-parse --short HEAD 2>/dev/null || echo "${KILN_COMMIT:-unknown}")"
  echo
  echo "Written by \`bench/tls_run.sh\`."
  echo "Machine: $cpu, $cores cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) RAM, Linux $(uname -r); $(openssl version)."
  echo "Load average before the run: $load_before; after: $load_after."
  echo "One kilnd listening on both; client (libkiln) and daemon share the machine (loopback);"
  echo "the build is \`$buildtype\`; TLS threads beside each side's own: $threads (\`KILN_TLS_THREADS\`)."
  echo "TLS 1.3, TLS_AES_128_GCM_SHA256 (kilnd's first choice), a P-256 certificate."
  echo "Command: \`${cmd[*]}\` (URLs as this run bound them; \`KILN_TLS_CA\` set to the run's CA)."
  echo "Each round measures TCP, then TLS, for each row; the table holds medians over $rounds rounds."
  echo "CPU seconds per GB (user + system of all threads, from getrusage and /proc/PID/stat) do not"
  echo "depend on what else runs: they are the cost TLS adds, where GB/s on a shared machine is also"
  echo "its share of it."
  echo
  echo "| measurement | tcp | tls | tls/tcp | |"
  echo "|---|---|---|---|---|"
  echo "| \`ping\` p50, 1 connection, sequential (20,000) | $ping_tcp us | $ping_tls us | $(ratio "$ping_tls" "$ping_tcp") | |"
  echo "| \`ping\` p99 | $p99_tcp us | $p99_tls us | $(ratio "$p99_tls" "$p99_tcp") | |"
  echo "| pipelined \`ping\`, 1 connection, depth 64 (200,000) | $rps_tcp req/s | $rps_tls req/s | $(ratio "$rps_tls" "$rps_tcp") | |"
  echo "| \`upload\` 64 MiB float32 (median of 5) | $up_tcp GB/s | $up_tls GB/s | time x$up_ratio | target <= 1.3x: $(within "$up_ratio") |"
  echo "| \`download\` 64 MiB float32 (median of 5) | $down_tcp GB/s | $down_tls GB/s | time x$down_ratio | target <= 1.3x: $(within "$down_ratio") |"
  for dir in upload download; do
    for who in client kilnd; do
      a=$(cpu "$TCP" $dir $who); b=$(cpu "$TLS" $dir $who)
      echo "| $dir: CPU seconds per GB, $who | $a | $b | +$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b - a }') | |"
    done
  done
  echo
  echo "Raw result lines:"
  echo
  echo '```'
  echo "$results"
  echo '```'
  echo
} >"$section"
# The new section goes before the first one (under the title and its note); what the file held
# stays.
if [ -f "$out" ] && grep -q '^## ' "$out"; then
  awk -v f="$section" '!done && /^## / { while ((getline l < f) > 0) print l; done = 1 } { print }' \
    "$out" >"$out.new"
else
  { echo "# TCP and TLS side by side"; echo; cat "$section"; } >"$out.new"
fi
mv "$out.new" "$out"
rm -f "$section"
echo "wrote $out" >&2
