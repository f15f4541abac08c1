#!/bin/sh
# Builds one libFuzzer target (libFuzzer + ASan + UBSan) straight from the sources with clang
# and runs it for N seconds (default 30). New inputs go to $OUT/corpus-TARGET; crashes to
# $OUT/TARGET-crash-*. Exit status is libFuzzer's: nonzero on a crash, leak or failed check.
#   tests/fuzz/run.sh TARGET [SECONDS] [libFuzzer flags...]    e.g. tests/fuzz/run.sh frame 600 -jobs=2
#   tests/fuzz/run.sh list                                      the targets
# Targets: frame (framing decoder), request (params validation), codeobj (prebuilt code objects
# and AMDGPU metadata), artifact (cached artifact decoding), job (the worker seam's jobs and
# replies, protocol/job*.c), tokens (tokens file parser), te
# (tensor-expression programs: parse, schedule, inline, bounds, launch recipes), tls13 (TLS 1.3
# records after the handshake, protocol/tls13.c).
# Environment: CLANG (default /usr/lib/llvm-22/bin/clang), OUT (default build/fuzz).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
targets="frame request codeobj artifact job tokens te tls13"
target=${1:-}
if [ "$target" = list ]; then echo "$targets"; exit 0; fi
case " $targets " in
*" $target "*) ;;
*) echo "usage: $0 TARGET [SECONDS] [libFuzzer flags...]; TARGET is one of: $targets" >&2; exit 2 ;;
esac
shift
seconds=${1:-30}
[ $# -gt 0 ] && shift
clang=${CLANG:-/usr/lib/llvm-22/bin/clang}
out=${OUT:-$root/build/fuzz}
mkdir -p "$out/corpus-$target"

base="base/status.c base/buf.c base/util.c base/map.c base/log.c"
extra_cflags=""
extra_libs=""
max_len=16384
case $target in
frame) srcs="protocol/mp.c protocol/frame.c protocol/rpc.c protocol/tensor.c" ;;
request) srcs="protocol/mp.c protocol/payload.c protocol/frame.c protocol/rpc.c protocol/tensor.c server/request.c" ;;
codeobj)
  srcs="compiler/validate.c compiler/elf.c compiler/amdgpu_metadata.c compiler/kernel_table.c protocol/mp.c protocol/artifact.c protocol/frame.c protocol/rpc.c protocol/tensor.c"
  extra_cflags="-I$(/usr/lib/llvm-22/bin/llvm-config --includedir 2>/dev/null || echo /usr/lib/llvm-22/include)"
  max_len=65536 ;;
artifact) srcs="protocol/mp.c protocol/rpc.c protocol/frame.c protocol/tensor.c protocol/artifact.c"; max_len=65536 ;;
job) srcs="protocol/mp.c protocol/frame.c protocol/rpc.c protocol/payload.c protocol/job.c protocol/job_tensor.c protocol/job_module.c protocol/job_compile.c protocol/job_graph.c" ;;
tokens) srcs="server/tenants.c"; max_len=8192 ;;
tls13) srcs="protocol/tls13.c"; extra_libs=$(pkg-config --libs libcrypto); max_len=4096 ;;
te)
  srcs="protocol/mp.c protocol/artifact.c protocol/rpc.c protocol/frame.c protocol/tensor.c"
  for f in program expr simplify interval symbounds mp parse parse_expr parse_prim sched inline bounds launch; do
    srcs="$srcs compiler/te/te_$f.c"
  done
  extra_cflags="-I$(/usr/lib/llvm-22/bin/llvm-config --includedir 2>/dev/null || echo /usr/lib/llvm-22/include)"
  max_len=65536 ;;
esac
files="$root/tests/fuzz/fuzz_$target.c"
for f in $base $srcs; do files="$files $root/$f"; done

# shellcheck disable=SC2046,SC2086 # pkg-config output and the file list are word lists
"$clang" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -D_GNU_SOURCE -std=gnu11 -I"$root" $extra_cflags $(pkg-config --cflags msgpack libsodium) \
  $files $(pkg-config --libs msgpack libsodium) $extra_libs -lm -o "$out/fuzz_$target"

# msgpack-c allocates a container's declared size before reading it; a huge one must fail
# the allocation and come back as an error, as it does in kiln's memory-limited workers.
export ASAN_OPTIONS="allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
exec "$out/fuzz_$target" -max_total_time="$seconds" -max_len=$max_len -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$out/$target-" -print_final_stats=1 "$@" \
  "$out/corpus-$target" "$root/tests/fuzz/corpus/$target"
