#!/usr/bin/env bash
# Adds to .gpu/ (after bench/gpu/stage.sh) what run.sh's fleet step needs on the lent GPU
# machine, which has neither Redis nor redis-py: Debian's redis-server and redis-tools with the
# libraries they load that Ubuntu's image may lack (libjemalloc2, liblzf1, libatomic1; libssl3,
# libsystemd0 and what they load are the host's), and python3-redis (pure Python; the machine's
# Python 3.12 venv has its packaging, wrapt and typing-extensions) with python3-async-timeout and
# python3-deprecated. They go to .gpu/debs-fleet; run.sh fleet unpacks them to /tmp/deps and puts
# its usr/bin on PATH, its dist-packages on PYTHONPATH. kiln.fleet verifies no records there
# (no trusted-keys file), so python3-cryptography is not needed.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d .gpu ] || { echo "stage_fleet.sh: run bench/gpu/stage.sh first" >&2; exit 1; }
rm -rf .gpu/debs-fleet && mkdir -p .gpu/debs-fleet
(cd .gpu/debs-fleet && apt-get download redis-server redis-tools libjemalloc2 liblzf1 libatomic1 \
  python3-redis python3-async-timeout python3-deprecated >/dev/null)
du -sk .gpu/debs-fleet | awk '{printf "  %s: %.1f MiB\n", $2, $1 / 1024}'
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
du -sb .gpu | awk -v t="$tree" '{printf "staged: %.1f MiB, with the working tree (%.1f MiB) %.1f MiB of the 64 MiB the device tool carries\n", $1 / 1048576, t / 1048576, ($1 + t) / 1048576}'
