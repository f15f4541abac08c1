#!/usr/bin/env bash
# Issue 13's benchmark: the whole device conformance suite (tests/device, 12 tests) on the
# software GPU, per target, against kiln's cpu backend in the same run (wall time of the test
# binary, RUNS times each), then the interpreter's instructions per second on the TE GEMM
# (BUILDDIR/bench/softgpu-isa-bench). Writes bench/results/softgpu.md (machine, date, commit, load).
#   bench/softgpu/run.sh [BUILDDIR] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/../.."
b=$(cd "${1:-build}" && pwd)
rel=${1:-build} # the paths as the command names them, for the results file
runs=${2:-3}
lib=$b/device/softgpu/rt/libhsa-runtime64.so.1
conf=$b/tests/device/test_device_conformance
isabench=$b/bench/softgpu-isa-bench
if grep -q "has no interpreter" "$lib"; then echo "run.sh: $lib has no interpreter" >&2; exit 1; fi
out=bench/results/softgpu.md
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

# seconds of one run of the suite; the run must pass 12 of 12
timed() {
  local t0 t1
  t0=$(date +%s.%N)
  env "$@" "$conf" > "$tmp" 2>&1 || { echo "run.sh: the suite failed ($*):" >&2; tail -20 "$tmp" >&2; exit 1; }
  t1=$(date +%s.%N)
  grep -q 'Tested: 12 | Passing: 12' "$tmp" || { echo "run.sh: not 12 of 12 ($*)" >&2; tail -5 "$tmp" >&2; exit 1; }
  echo "$t1 - $t0" | bc
}

row() {
  local label=$1; shift
  local all=() t
  for _ in $(seq "$runs"); do
    t=$(timed "$@") || exit 1 # timed exits its subshell on a failed run: stop, write nothing
    all+=("$t")
  done
  local sorted min med
  sorted=$(printf '%s\n' "${all[@]}" | sort -n)
  min=$(head -n 1 <<<"$sorted")
  med=$(sed -n "$(( (runs + 1) / 2 ))p" <<<"$sorted")
  printf '| %s | %.2f | %.2f | %s |\n' "$label" "$min" "$med" "$(printf '%.2f ' "${all[@]}")"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rows=$(
  set -e
  row "hsa:0 softgpu gfx942" KILN_TEST_BACKENDS=hsa KILN_HSA_LIBRARY="$lib" SOFTGPU_TARGET=gfx942
  row "hsa:0 softgpu gfx90a" KILN_TEST_BACKENDS=hsa KILN_HSA_LIBRARY="$lib" SOFTGPU_TARGET=gfx90a
  row "cpu:0 (kiln's cpu backend, peer)" KILN_TEST_BACKENDS=cpu
) || { echo "run.sh: a run failed; $out is unchanged" >&2; exit 1; }
# the interpreter alone on kiln.topi's 256^3 GEMM (it checks one element of the product itself)
gemm=$("$isabench" gemm256 "$runs") || { echo "run.sh: softgpu-isa-bench failed; $out is unchanged" >&2; exit 1; }
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

cat > "$out" <<MD
# The device conformance suite on the software GPU (issue 13)

Written by bench/softgpu/run.sh; every number below comes from one run of it.

- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) CPUs online
- date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $(git rev-parse --short HEAD)
- load average (1/5/15 min): before $load_before, after $load_after (the machine is shared)
- what: \`$rel/tests/device/test_device_conformance\` (12 tests: vadd, saxpy, transpose, reduction, histogram, stencil, math,
  int64 indexing, 105 arguments, partial groups, timing, fault + next launch), wall time of
  the whole binary, $runs runs per row; the stand-in is \`$rel/device/softgpu/rt/libhsa-runtime64.so.1\` loaded by kiln's hsa backend;
  the interpreter's worker threads: SOFTGPU_THREADS (unset: the CPUs this process may use)
- target (issue 13): under 30 s per target on the 2-core machine

## The conformance suite

Command: \`bench/softgpu/run.sh $rel $runs\` (it writes this whole file).

| device | min s | median s | all runs s |
|---|---|---|---|
$rows

## The interpreter on the TE GEMM

Command: \`$rel/bench/softgpu-isa-bench gemm256 $runs\` (bench/softgpu_isa_bench.c; also run by
bench/softgpu/run.sh): kiln.topi's 256^3 matmul (\`schedule_matmul(C, "gpu")\`) built by kiln's
compiler for each target, one decoding dispatch ("first") then $runs timed dispatches on the
interpreter through tests/softgpu/isa's harness (not through kilnd). A wave instruction is up
to 64 lane operations; CPU seconds count every thread of the process
(bench/results/softgpu_isa.md has the interpreter's own history).

$gemm
MD
cat "$out"
