#!/usr/bin/env bash
# Runs on the lent GPU machine, in the repository copy, after bench/gpu/stage.sh here: unpacks
# the staged runtime packages and binaries, then runs what is asked, writing logs to $OUT.
#   bench/gpu/run.sh conformance    the device conformance suite on cuda:0
#   bench/gpu/run.sh server         kilnd end to end on cuda:0 (test_compile, test_te_server)
#   bench/gpu/run.sh bench          kiln-device-bench cuda:0
#   bench/gpu/run.sh python         the Python suite's GPU cases (test_te, test_topi) when the
#                                   machine's python3 has numpy, msgpack and pytest
#   bench/gpu/run.sh tls            bench/tls_run.sh (TCP beside TLS on loopback) on this
#                                   machine's idle cores, written to $OUT/tls.md
#   bench/gpu/run.sh tune           bench/gpu/tune_gemm.py: SGEMM 1024/2048/4096 tuned by kiln.autotune
#                                   beside cuBLAS (torch, TF32 off); TUNE_BUDGET=s,s,s,
#                                   TUNE_SIZES=n,n,n, TUNE_RESUME=records of an earlier run;
#                                   TUNE_CONFIGS=bench/gpu/gemm_quick.json: time those only
#                                   (bench/gpu/gemm_vthread.json: the vthread / min_blocks knobs
#                                   beside the old best, ordered by what ptxas -v predicts;
#                                   bench/gpu/gemm_kmajor.json: k-major A tiles, k_major)
#   bench/gpu/run.sh curves         bench/autotune_curves.py on cuda:0: the model tuner against the
#                                   random tuner over CURVES_SEEDS (5) seeds of CURVES_TRIALS (120)
#                                   trials, SGEMM CURVES_N (2048), to $OUT/curves.md and the
#                                   records to $OUT/curves_records.jsonl(.xz)
#   bench/gpu/run.sh graph          the graph server tests and the conv GPU schedules' tests on
#                                   cuda:0, then ResNet-50 and EfficientNet-Lite0 (payloads
#                                   staged by stage.sh, weights made here from a seed) timed by
#                                   graph_time, each beside the same network in torch (fp32, TF32
#                                   off) when the machine's python3 has it, logits compared
#                                   (bench/graph_gpu.py); again with stream launches
#                                   (KILN_CUDA_GRAPHS=0) and launch by launch
#                                   (KILN_GRAPH_SEQUENCE=0), and without per-node progress marks
#                                   (KILN_GRAPH_MARKS=0); needs numpy, msgpack and pytest
#   bench/gpu/run.sh graphprof      the staged models' kernels each timed alone beside the
#                                   whole graph (bench/graph_gpu.py profile), to $OUT/graph_profile.md
#   bench/gpu/run.sh fleet          bench/fleet_tune_bench.py: a matmul tuned on one kilnd alone,
#                                   then over FLEET_HOSTS (3) kilnds sharing a Redis on loopback,
#                                   each kilnd on its own FLEET_CORES (4) cores (cpu:0 on one,
#                                   compile workers on the rest), FLEET_TRIALS (256) trials of
#                                   n FLEET_N (256), kiln.autotune's batch FLEET_BATCH (its
#                                   default), to $OUT/fleet.md; after stage.sh and
#                                   stage_fleet.sh (Redis and redis-py); first
#                                   bench/gpu/affinity_check.py says whether pinning holds there
#   bench/gpu/run.sh all            the six above but tune and fleet, in that order
# After `stage.sh --lean` (.gpu/lean) the C binaries are not staged: conformance, server, bench
# and tls say so and are skipped. GRAPH_DEVICE (cuda:0) and GRAPH_ARGS (more arguments of
# graph_gpu.py run) serve a try of the graph step's logic elsewhere: GRAPH_DEVICE=cpu:0
# GRAPH_ARGS="--models efficientnet_lite0 --number 1 --repeat 1" on a machine without a GPU.
# Figures in bench/results name the command that produced them.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/deps
for f in .gpu/debs/*.deb; do dpkg -x "$f" /tmp/deps; done
tar -xJf .gpu/kiln.tar.xz
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:/tmp/deps/usr/lib/llvm-22/lib:/tmp/deps/lib/x86_64-linux-gnu
build=${BUILD:-build}
export KILN_DEVICE_LIBS=/tmp/deps/usr/lib/x86_64-linux-gnu/amdgcn/bitcode
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
rc=0
lean() {
  if [ -e .gpu/conformance ] && [ "$1" != conformance ]; then
    echo "$1: not staged (bench/gpu/stage.sh --conformance stages the conformance suite only)" | tee "$OUT/$1.log"
    return 0
  fi
  if [ -e .gpu/lean ]; then
    echo "$1: not staged (bench/gpu/stage.sh --lean leaves the C binaries out)" | tee "$OUT/$1.log"
    return 0
  fi
  return 1
}
conformance() {
  lean conformance && return
  KILN_TEST_BACKENDS=cuda "$build/tests/device/test_device_conformance" --verbose=1 2>&1 |
    tee "$OUT/conformance.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
}
server() {
  lean server && return
  for t in test_compile test_te_server; do
    KILND=$PWD/$build/server/kilnd KILN_TEST_DEVICE=cuda:0 "$build/tests/server/$t" --verbose=1 2>&1 |
      tee "$OUT/$t.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  done
}
bench() {
  lean bench && return
  "$build/bench/kiln-device-bench" cuda:0 "$build/tests/device" 2>&1 | tee "$OUT/device_bench.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
}
python() {
  if ! python3 -c 'import numpy, msgpack, pytest' 2>/dev/null; then
    echo "python: python3 here lacks numpy, msgpack or pytest; the Python suite is not run" |
      tee "$OUT/python.log"
    return
  fi
  KILND=$PWD/$build/server/kilnd PYTHONPATH=$PWD/clients/python python3 -m pytest \
    tests/python/test_te.py tests/python/test_topi.py -q -rs -p no:cacheprovider 2>&1 |
    tee "$OUT/python.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
}
tls() {
  lean tls && return
  KILN_COMMIT=$(cat .gpu/commit 2>/dev/null) TLS_RESULTS=$OUT/tls.md BUILD=$build bash bench/tls_run.sh \
    > "$OUT/tls.log" 2>&1
  [ $? -eq 0 ] || rc=1
}
tune() {
  python3 bench/gpu/tune_gemm.py --kilnd "$PWD/$build/server/kilnd" --budget "${TUNE_BUDGET:-60,60,240}" \
    --sizes "${TUNE_SIZES:-1024,2048,4096}" ${TUNE_RESUME:+--resume "$TUNE_RESUME"} \
    ${TUNE_CONFIGS:+--configs "$TUNE_CONFIGS"} \
    --out "$OUT" > "$OUT/tune_gemm.log" 2>&1
  [ $? -eq 0 ] || rc=1
}
curves() {
  # the model tuner against the random tuner on the GPU matmul space, CURVES_SEEDS seeds of
  # CURVES_TRIALS trials each at n CURVES_N (bench/autotune_curves.py --device cuda:0)
  python3 bench/autotune_curves.py --kilnd "$PWD/$build/server/kilnd" --device cuda:0 --ops matmul \
    --n "${CURVES_N:-2048}" --seeds "${CURVES_SEEDS:-5}" --trials "${CURVES_TRIALS:-120}" \
    --out "$OUT/curves.md" --records "$OUT/curves_records.jsonl" > "$OUT/curves.log" 2>&1
  [ $? -eq 0 ] || rc=1
  xz -9 -k "$OUT/curves_records.jsonl" 2>/dev/null || true
}
graph() {
  local gdev=${GRAPH_DEVICE:-cuda:0} gargs=${GRAPH_ARGS:-}
  if ! python3 -c 'import numpy, msgpack, pytest' 2>/dev/null; then
    echo "graph: python3 here lacks numpy, msgpack or pytest; the graph step is not run" | tee "$OUT/graph.log"
    return
  fi
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 |
    tail -1 | tee "$OUT/graph_torch.txt"
  KILND=$PWD/$build/server/kilnd KILN_TEST_DEVICE=$gdev PYTHONPATH=$PWD/clients/python python3 -m pytest \
    tests/python/test_graph_server.py tests/python/test_conv_gpu.py tests/python/test_gemv_gpu.py -q -rs -p no:cacheprovider 2>&1 |
    tee "$OUT/graph_tests.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  if [ ! -d .gpu/graphs ]; then
    echo "graph: no staged payloads (.gpu/graphs: bench/gpu/stage.sh makes them where build/onnx-venv exists)" |
      tee -a "$OUT/graph.log"
    return
  fi
  KILND=$PWD/$build/server/kilnd python3 bench/graph_gpu.py run .gpu/graphs --device "$gdev" $gargs \
    --out "$OUT/graph_gpu.md" 2>&1 | tee "$OUT/graph.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  # what launch sequences save: the same graphs without CUDA graph capture, and launch by launch
  KILN_CUDA_GRAPHS=0 KILND=$PWD/$build/server/kilnd python3 bench/graph_gpu.py run .gpu/graphs \
    --device "$gdev" $gargs --label "(stream launches: KILN_CUDA_GRAPHS=0)" --no-peer --out "$OUT/graph_gpu.md" \
    2>&1 | tee -a "$OUT/graph.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  KILN_GRAPH_MARKS=0 KILND=$PWD/$build/server/kilnd python3 bench/graph_gpu.py run .gpu/graphs \
    --device "$gdev" $gargs --label "(no per-node marks: KILN_GRAPH_MARKS=0)" --no-peer --out "$OUT/graph_gpu.md" \
    2>&1 | tee -a "$OUT/graph.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  KILN_GRAPH_SEQUENCE=0 KILND=$PWD/$build/server/kilnd python3 bench/graph_gpu.py run .gpu/graphs \
    --device "$gdev" $gargs --label "(launch by launch: KILN_GRAPH_SEQUENCE=0)" --no-peer --out "$OUT/graph_gpu.md" \
    2>&1 | tee -a "$OUT/graph.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
}
graphprof() {
  if [ ! -d .gpu/graphs ]; then
    echo "graphprof: no staged payloads (.gpu/graphs: bench/gpu/stage.sh)" | tee "$OUT/graph_profile.log"
    return
  fi
  KILND=$PWD/$build/server/kilnd python3 bench/graph_gpu.py profile .gpu/graphs --device cuda:0 \
    --models resnet50,efficientnet_lite0 --out "$OUT/graph_profile.md" 2>&1 | tee "$OUT/graph_profile.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
}
fleet() {
  if [ ! -d .gpu/debs-fleet ]; then
    echo "fleet: Redis not staged (bench/gpu/stage_fleet.sh)" | tee "$OUT/fleet.log"
    rc=1
    return
  fi
  for f in .gpu/debs-fleet/*.deb; do dpkg -x "$f" /tmp/deps; done
  local py=${FLEET_PYTHON:-python3}
  PATH=/tmp/deps/usr/bin:$PATH "$py" bench/gpu/affinity_check.py 2>&1 | tee "$OUT/fleet.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
  PATH=/tmp/deps/usr/bin:$PATH PYTHONPATH=/tmp/deps/usr/lib/python3/dist-packages${PYTHONPATH:+:$PYTHONPATH} \
    KILND=$PWD/$build/server/kilnd "$py" bench/fleet_tune_bench.py --hosts "${FLEET_HOSTS:-3}" \
    --cores-per-host "${FLEET_CORES:-4}" --n "${FLEET_N:-256}" --trials "${FLEET_TRIALS:-256}" \
    ${FLEET_BATCH:+--batch "$FLEET_BATCH"} \
    --out "$OUT/fleet.md" 2>&1 | tee -a "$OUT/fleet.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
}
case "${1:-all}" in
  conformance) conformance ;;
  server) server ;;
  bench) bench ;;
  python) python ;;
  tls) tls ;;
  tune) tune ;;
  curves) curves ;;
  graph) graph ;;
  graphprof) graphprof ;;
  fleet) fleet ;;
  all) conformance; server; bench; python; tls; graph ;;
  *) echo "usage: bench/gpu/run.sh conformance|server|bench|python|tls|tune|graph|graphprof|fleet|all" >&2; exit 2 ;;
esac
exit $rc
