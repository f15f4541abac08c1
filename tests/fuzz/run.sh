#!/bin/sh
# Builds the framing fuzzer (libFuzzer + ASan + UBSan) straight from the sources with clang and
# runs it for N seconds (default 30). New inputs go to $OUT/corpus; crashes to $OUT/.
#   tests/fuzz/run.sh [SECONDS] [libFuzzer flags...]      e.g. tests/fuzz/run.sh 600 -jobs=2
# Environment: CLANG (default /usr/lib/llvm-22/bin/clang), OUT (default build/fuzz).
set -eu
seconds=${1:-30}
[ $# -gt 0 ] && shift
root=$(cd "$(dirname "$0")/../.." && pwd)
clang=${CLANG:-/usr/lib/llvm-22/bin/clang}
out=${OUT:-$root/build/fuzz}
mkdir -p "$out/corpus"

# shellcheck disable=SC2046 # pkg-config output is a list of flags
"$clang" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -D_GNU_SOURCE -std=gnu11 -I"$root" $(pkg-config --cflags msgpack) \
  "$root/tests/fuzz/fuzz_frame.c" "$root/protocol/frame.c" "$root/protocol/rpc.c" \
  "$root/protocol/tensor.c" "$root/base/status.c" "$root/base/buf.c" \
  $(pkg-config --libs msgpack) -o "$out/fuzz_frame"

exec "$out/fuzz_frame" -max_total_time="$seconds" -max_len=16384 -timeout=10 \
  -rss_limit_mb=2048 -artifact_prefix="$out/" -print_final_stats=1 "$@" \
  "$out/corpus" "$root/tests/fuzz/corpus/frame"
