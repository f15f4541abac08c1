#!/usr/bin/env bash
# Stages what the lent GPU machine (Ubuntu 24.04, no package registries) needs to run kiln
# built here: the Debian runtime packages of every shared library the binaries load (found
# with ldd, glibc and libstdc++ left to the host), and an xz tarball of the binaries and test
# data. Both go to .gpu/ (ignored by git; carried to the device with `carry: [".gpu"]`), where
# bench/gpu/run.sh unpacks them.
#   bench/gpu/stage.sh            uses build/ (BUILD=dir to change)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> "$(git rev-parse --git-common-dir)/info/exclude"
rm -rf .gpu && mkdir -p .gpu/debs
bins=(
  "$build/server/kilnd" "$build/device/worker/kiln-device-worker"
  "$build/compiler/worker/kiln-compile-worker" "$build/clients/c/kiln"
  "$build/tests/device/test_device_conformance" "$build/tests/server/test_compile"
  "$build/tests/server/test_te_server" "$build/bench/kiln-device-bench"
  "$build/bench/kiln-tls-bench"
)
libs=$(for b in "${bins[@]}"; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u)
pkgs=$(for l in $libs; do dpkg -S "$(readlink -f "$l")" 2>/dev/null | cut -d: -f1; done | sort -u |
       grep -vE '^(libc6|libstdc\+\+6|libgcc-s1|llvm-22-dev)$' || true)
# libLLVM.so.22.1 resolves through llvm-22-dev's symlink to libllvm22's file.
pkgs="$pkgs libllvm22"
# The AMD device libraries (ocml/ockl bitcode): the GPU cases also compile for gfx942 there.
pkgs="$pkgs rocm-device-libs"
(cd .gpu/debs && apt-get download $pkgs >/dev/null)
# The binaries, the test kernels' artifacts and the Python client, with their paths.
tar -cJf .gpu/kiln.tar.xz "${bins[@]}" $(ls "$build"/tests/device/*.kart) clients/python/kiln \
  tests/python
git rev-parse --short HEAD > .gpu/commit
# Graph payloads for run.sh's graph step, made where kiln.onnx's peers are installed
# (bash .ci/onnx-venv): the GPU machine has no onnx.
venv=${KILN_ONNX_VENV:-build/onnx-venv}
if [ -x "$venv/bin/python" ]; then
  "$venv/bin/python" bench/graph_gpu.py stage .gpu/graphs
else
  echo "no $venv: the graph step will run the graph server tests only (bash .ci/onnx-venv to stage models)"
fi
du -sh .gpu | cut -f1 | sed 's/^/staged: /'
ls .gpu/debs | wc -l | sed 's/$/ packages/'
