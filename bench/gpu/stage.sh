#!/usr/bin/env bash
# Stages what the lent GPU machine (Ubuntu 24.04, no package registries) needs to run kiln
# built here: the Debian runtime packages of every shared library the binaries load (found
# with ldd, glibc and libstdc++ left to the host), and an xz tarball of the binaries and test
# data. Both go to .gpu/ (ignored by git; carried to the device with `carry: [".gpu"]`), where
# bench/gpu/run.sh unpacks them. The device tool carries 64 MiB in all: the size is printed.
#   bench/gpu/stage.sh            uses build/ (BUILD=dir to change)
#   bench/gpu/stage.sh --lean     for run.sh's graph, graphprof and python steps only: kilnd, its
#                                 workers and the CLI, without the C test binaries (and so without
#                                 criterion's libgit2 chain), and without the packages the
#                                 Ubuntu host has itself (gnutls and what it loads); .gpu/lean
#                                 tells run.sh, whose C steps then say they are not staged
#   bench/gpu/stage.sh --conformance  for run.sh's conformance step only: the conformance suite
#                                 and its kernels, without kilnd, its workers and LLVM (the
#                                 suite loads none of them), so that it fits the 64 MiB beside
#                                 the working tree; .gpu/conformance tells run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
lean=0
conf=0
case "${1:-}" in
  --lean) lean=1 ;;
  --conformance) conf=1 ;;
  "") ;;
  *) echo "usage: bench/gpu/stage.sh [--lean|--conformance]" >&2; exit 2 ;;
esac
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> "$(git rev-parse --git-common-dir)/info/exclude"
rm -rf .gpu && mkdir -p .gpu/debs
bins=(
  "$build/server/kilnd" "$build/device/worker/kiln-device-worker"
  "$build/compiler/worker/kiln-compile-worker" "$build/clients/c/kiln"
)
if [ $conf = 1 ]; then
  bins=("$build/tests/device/test_device_conformance")
elif [ $lean = 0 ]; then
  bins+=(
    "$build/tests/device/test_device_conformance" "$build/tests/server/test_compile"
    "$build/tests/server/test_te_server" "$build/bench/kiln-device-bench"
    "$build/bench/kiln-tls-bench"
  )
fi
libs=$(for b in "${bins[@]}"; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u)
pkgs=$(for l in $libs; do dpkg -S "$(readlink -f "$l")" 2>/dev/null | cut -d: -f1; done | sort -u |
       grep -vE '^(libc6|libstdc\+\+6|libgcc-s1|llvm-22-dev)$' || true)
if [ $lean = 1 ]; then
  # the Ubuntu host has these (same sonames); its own copies load each other
  pkgs=$(echo "$pkgs" | grep -vE '^(libgnutls30|libnettle8|libhogweed6|libgmp10|libunistring2|libidn2-0|libp11-kit0|libtasn1-6|libgit2-.*)$' || true)
  touch .gpu/lean
fi
if [ $conf = 1 ]; then
  touch .gpu/conformance
else
  # libLLVM.so.22.1 resolves through llvm-22-dev's symlink to libllvm22's file.
  pkgs="$pkgs libllvm22"
  # The AMD device libraries (ocml/ockl bitcode): the GPU cases (test_conv_gpu.py in the graph
  # step too) also compile for gfx942 there.
  pkgs="$pkgs rocm-device-libs"
fi
(cd .gpu/debs && apt-get download $pkgs >/dev/null)
# The binaries, the test kernels' artifacts and the Python client, with their paths.
karts=()
[ $lean = 1 ] || karts=("$build"/tests/device/*.kart)
tar -cJf .gpu/kiln.tar.xz "${bins[@]}" "${karts[@]}" clients/python/kiln tests/python
git rev-parse --short HEAD > .gpu/commit
# Graph payloads for run.sh's graph step, made where kiln.onnx's peers are installed
# (bash .ci/onnx-venv): the GPU machine has no onnx.
venv=${KILN_ONNX_VENV:-build/onnx-venv}
if [ -x "$venv/bin/python" ]; then
  "$venv/bin/python" bench/graph_gpu.py stage .gpu/graphs
else
  echo "no $venv: the graph step will run the graph server tests only (bash .ci/onnx-venv to stage models)"
fi
for d in .gpu/debs .gpu/kiln.tar.xz .gpu/graphs; do [ -e "$d" ] && du -sk "$d"; done | awk '{printf "  %s: %.1f MiB\n", $2, $1 / 1024}'
# what travels: the working tree (tracked and untracked-not-ignored files) and .gpu
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
du -sb .gpu | awk -v t="$tree" '{printf "staged: %.1f MiB, with the working tree (%.1f MiB) %.1f MiB of the 64 MiB the device tool carries%s\n", $1 / 1048576, t / 1048576, ($1 + t) / 1048576, ($1 + t > 67108864 ? " (OVER: try --lean)" : "")}'
ls .gpu/debs | wc -l | sed 's/$/ packages/'
