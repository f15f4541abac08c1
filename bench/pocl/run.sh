#!/usr/bin/env bash
# kiln's cpu backend beside PoCL (issue 7, Performance, CPU): installs PoCL if missing, builds
# bench/pocl/pocl_vs_kiln against the meson build's static libraries, runs it and
# kiln-device-bench in the same run on 2 cores, and writes bench/results/devices_cpu.md.
#   bench/pocl/run.sh         uses build/ (BUILD=dir to change); run as root for apt-get
# Needs: a built tree (ninja -C build): the static libs, build/tests/device/*.cpu.kart and
# build/bench/kiln-device-bench.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
out=bench/results/devices_cpu.md
cores=${CORES:-2}

# PoCL (Debian's pocl-opencl-icd) and the OpenCL headers / ICD loader; idempotent.
if [ "$(dpkg-query -W -f='${Status}\n' pocl-opencl-icd ocl-icd-opencl-dev 2>/dev/null | grep -c 'install ok installed')" != 2 ]; then
  [ "$(id -u)" = 0 ] || { echo "run.sh: pocl-opencl-icd / ocl-icd-opencl-dev missing; run as root to install" >&2; exit 2; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pocl-opencl-icd ocl-icd-opencl-dev >&2
fi

for f in "$build/device/libkiln_device.a" "$build/compiler/libkiln_artifact.a" "$build/base/libkiln_base.a" \
         "$build/bench/kiln-device-bench" "$build/tests/device/vadd.cpu.kart"; do
  [ -e "$f" ] || { echo "run.sh: $f is missing; build first (ninja -C $build)" >&2; exit 2; }
done
bin=$build/bench/pocl_vs_kiln
gcc -O2 -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers \
  -I. -I"$build" -pthread bench/pocl/pocl_vs_kiln.c -o "$bin" \
  "$build/device/libkiln_device.a" "$build/compiler/libkiln_artifact.a" "$build/base/libkiln_base.a" \
  -lmsgpackc -lsodium -lOpenCL -lpthread -ldl -lm

# Both on the same `cores` cores: the process is pinned to them (kiln's pool and PoCL's
# threads inherit the mask) and PoCL is told to use that many compute units.
cpus=0-$((cores - 1))
pin=(taskset -c "$cpus")
command -v taskset >/dev/null || pin=()
export POCL_CPU_MAX_CU_COUNT=$cores POCL_MAX_PTHREAD_COUNT=$cores

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
work=$(mktemp -d /tmp/kiln-pocl-XXXXXX)
trap 'rm -rf "$work"' EXIT
"${pin[@]}" "$build/bench/kiln-device-bench" cpu:0 "$build/tests/device" >"$work/devbench.txt"
status=0
"${pin[@]}" "$bin" "$build/tests/device" bench/pocl/kernels.cl >"$work/table.md" 2>"$work/err.txt" || status=$?
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$status" != 0 ] && ! grep -q '^| ' "$work/table.md"; then
  cat "$work/err.txt" >&2
  exit "$status"
fi

{
  echo "# kiln cpu backend beside PoCL (issue 7, Performance, CPU)"
  echo
  echo "Written by bench/pocl/run.sh; every number below comes from one run of it."
  echo
  echo "- machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) CPUs online, $((cores)) used ($cpus)"
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD)"
  echo "- load average (1/5/15 min): before $load_before, after $load_after"
  echo "- PoCL package: $(dpkg-query -W -f='${Package} ${Version}' pocl-opencl-icd); POCL_CPU_MAX_CU_COUNT=$cores"
  echo
  echo "## kiln-device-bench cpu:0 (same run)"
  echo
  echo '```'
  cat "$work/devbench.txt"
  echo '```'
  echo
  echo "## Conformance kernels: kiln vs PoCL (bench/pocl/pocl_vs_kiln.c, bench/pocl/kernels.cl)"
  echo
  grep -v 'warnings\? generated' "$work/table.md"
  if [ "$status" != 0 ]; then echo; echo "**pocl_vs_kiln exited with status $status:** $(tail -1 "$work/err.txt")"; fi
} >"$out"
cat "$out"
exit "$status"
