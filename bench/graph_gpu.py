#!/usr/bin/env python3
"""Whole models on a GPU through kilnd's graph methods (issue 14's H200 numbers), in two steps,
because the lent GPU machine has no package registry (no onnx, no onnxruntime):

    build/onnx-venv/bin/python bench/graph_gpu.py stage .gpu/graphs     # here (bench/gpu/stage.sh)
    python3 bench/graph_gpu.py run .gpu/graphs --device cuda:0 [--out FILE]   # there (run.sh graph)
    python3 bench/graph_gpu.py profile .gpu/graphs --device cuda:0 [--out FILE]   # run.sh graphprof

stage: imports ResNet-50 (kiln.onnx.models.resnet50: torchvision's structure, BatchNorm folded
as torch.onnx.export writes it, He-initialised weights of seed 0) and EfficientNet-Lite0
(models.efficientnet_lite0's structure with efficientnet_lite0_weights(0): random He-style
weights, not the published ones; fine for timing, meaningless for classes) for a GPU target
(--models picks), and writes each graph payload (NAME.kgraph, graph_create's bytes), its input
(NAME.input.npy, random) and onnxruntime's CPU output for it (NAME.ref.npy). The weights do
not travel (the device tool carries 64 MiB; ResNet-50 has 102 MB of them): the payload names
them as tensor ids (docs/graph.md), and NAME.weights.json says which array of model_weights
(transposed or not) each is, for run to make from the seed and upload there.

run: needs only numpy and msgpack (and torch, if the machine has it). Starts a private kilnd
(KILND, else build/server/kilnd) unless --url is given; for each staged model: graph_create
cold (an empty cache) and warm, graph_run checked against the reference (max |diff|, top-5),
graph_time (number 20, repeat 5: the device worker's clock); beside torch when `import torch`
works and sees a GPU (or runs on the CPU for --device cpu:N): the same network written with
torch.nn.functional, the same weights (model_weights, BatchNorm folded), fp32 with TF32 off,
cudnn.benchmark, CUDA events, its logits checked against the reference and against kiln's;
and the per-kernel overhead of graph_run on a graph of 100 tiny kernels
(bench/graph_bench.py's). Prints one markdown section (--out appends it to a file). --label
and --no-peer serve the runs of the same step with KILN_GRAPH_SEQUENCE=0 or KILN_CUDA_GRAPHS=0
in kilnd's environment (docs/graph.md §5), which measure what launch sequences save.

profile: each kernel of a staged graph timed alone by kilnd's `time` beside graph_time of the
whole graph, grouped by kind (1x1 convs as GEMMs, 3x3 and 7x7 convs by output size, the
rest), and the slowest kernels with their geometry.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, os.path.join(ROOT, "clients", "python", "examples"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import numpy as np  # noqa: E402


# The models staged: the seed of their inputs, and where their weights come from. Both are
# made from a seed again on the GPU machine (the device tool carries 64 MiB: ResNet-50's 102 MB
# of weights and EfficientNet-Lite0's 18.8 MB do not travel), so both have random weights:
# right for timing, not for classifying.
MODELS = ("resnet50", "efficientnet_lite0")


def model_weights(name):
    """{name: ndarray}: every weight the staged payload of model `name` names by tensor id
    (maybe transposed), made from seed 0: resnet50_weights(0), or EfficientNet-Lite0's random
    weights of seed 0 with BatchNorm folded as kiln.onnx folds it (bit for bit). The torch
    peer runs the same arrays."""
    from kiln.onnx import models
    if name == "resnet50":
        return models.resnet50_weights(0)
    return models.efficientnet_lite0_folded(models.efficientnet_lite0_weights(0))


def onnx_model(name):
    from kiln.onnx import models
    return models.resnet50(0) if name == "resnet50" else models.efficientnet_lite0(models.efficientnet_lite0_weights(0))


def stage(a):
    import onnxruntime as ort
    import kiln.onnx
    os.makedirs(a.dir, exist_ok=True)
    for seed, name in enumerate(a.models.split(","), 1):
        if name not in MODELS:
            sys.exit("stage: unknown model %r (known: %s)" % (name, ", ".join(MODELS)))
        model = onnx_model(name)
        x = np.random.default_rng(seed).standard_normal((1, 3, 224, 224)).astype(np.float32)
        payload, _ = kiln.onnx.build_payload(model, target=a.target)
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        ref = sess.run(None, {payload.inputs[0][0]: x})[0]
        # each weight of the payload is one of model_weights(name), maybe transposed (2-D and
        # 1x1 convolutions as GEMMs): recorded by name, to be made again where it runs
        known = {}
        for wn, w in model_weights(name).items():
            known[w.tobytes()] = (wn, False)
            if w.ndim >= 2:
                known[np.ascontiguousarray(w.reshape(w.shape[0], -1).T).tobytes()] = (wn, True)
        recipe, ids = {}, {}
        for cn, c in payload.constants:
            hit = known.get(c.tobytes()) if c.dtype == np.float32 and c.nbytes > 256 else None
            if hit:
                ids[cn] = len(ids) + 1          # a placeholder, replaced by run
                recipe[cn] = [hit[0], hit[1], list(c.shape), ids[cn]]
        inline = sum(c.nbytes for cn, c in payload.constants if cn not in ids)
        with open(os.path.join(a.dir, name + ".weights.json"), "w") as f:
            json.dump(recipe, f)
        with open(os.path.join(a.dir, name + ".kgraph"), "wb") as f:
            f.write(payload.encode(ids))
        np.save(os.path.join(a.dir, name + ".input.npy"), x)
        np.save(os.path.join(a.dir, name + ".ref.npy"), ref)
        print("staged %s: %d kernels, %d programs, %.1f MB of weights made again where it runs, %d bytes inline" % (
            name, len(payload.nodes), len(payload.programs), (payload.constant_bytes() - inline) / 1e6, inline))


def weight_arrays(name, recipe):
    """{constant name: ndarray} of the staged model's weights named by tensor id, made here
    from model_weights(name) as the stage's recipe says."""
    w = model_weights(name)
    out = {}
    for cn, (wn, transposed, shape, _) in recipe.items():
        v = w[wn]
        out[cn] = np.ascontiguousarray(v.reshape(v.shape[0], -1).T if transposed else v).reshape(shape)
    return out


def upload_weights(s, dev, name, payload, recipe):
    """The staged payload with its weights made here (weight_arrays), uploaded, and their
    tensor ids in place of the stage's placeholders."""
    import msgpack
    import kiln
    arrays = weight_arrays(name, recipe)
    by_placeholder = {r[3]: cn for cn, r in recipe.items()}
    g = msgpack.unpackb(payload, raw=False)
    tensors = []
    for c in g["constants"]:
        if "id" not in c:
            continue
        t = kiln.nd.array(arrays[by_placeholder[c["id"]]], dev)
        tensors.append(t)
        c["id"] = t.id
    return msgpack.packb(g, use_bin_type=True), tensors


def staged(d, names, s, dev):
    """(name, payload, tensors uploaded for it) of each model staged in d: its weights made
    and uploaded where the stage named them by tensor id."""
    for name in names:
        path = os.path.join(d, name + ".kgraph")
        if not os.path.exists(path):
            continue
        payload = open(path, "rb").read()
        wpath = os.path.join(d, name + ".weights.json")
        uploaded = []
        if os.path.exists(wpath):
            payload, uploaded = upload_weights(s, dev, name, payload, json.load(open(wpath)))
        yield name, payload, uploaded


def start_kilnd(cache):
    kilnd = os.environ.get("KILND") or os.path.join(ROOT, "build", "server", "kilnd")
    sock = os.path.join(cache, "k.sock")
    r, w = os.pipe()
    p = subprocess.Popen([kilnd, "--listen", "unix:" + sock, "--cache-dir", os.path.join(cache, "cache"),
                          "--ready-fd", str(w)], pass_fds=[w], stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(cache, "kilnd.log"), "w"))
    os.close(w)
    os.read(r, 4096)
    os.close(r)
    return p, "unix:" + sock


def torch_peer(device):
    """(torch, {model: forward}) of torch's functional ResNet-50 and EfficientNet-Lite0 with
    model_weights' arrays (eval: BatchNorm folded, as in kiln's payload), on CUDA for a GPU
    device, on the CPU for cpu:N (to try the steps here); or (None, why not)."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None, "torch is not installed"
    gpu = not device.startswith("cpu")
    if gpu and not torch.cuda.is_available():
        return None, "torch sees no CUDA device"
    where = "cuda" if gpu else "cpu"
    from kiln.onnx import models

    def tensors(name):
        return {k: torch.from_numpy(v).to(where) for k, v in model_weights(name).items()}

    def resnet50():
        w = tensors("resnet50")
        convs, plan = models.resnet50_layers()
        spec = {c[0]: c for c in convs}

        def conv(x, name, relu):
            _, _, _, _, s, p = spec[name]
            y = F.conv2d(x, w[name + ".weight"], w[name + ".bias"], stride=s, padding=p)
            return F.relu(y) if relu else y

        def forward(x):
            for step in plan:
                if step[0] == "conv":
                    x = conv(x, step[1], step[2])
                elif step[0] == "maxpool":
                    x = F.max_pool2d(x, 3, 2, 1)
                elif step[0] == "block":
                    names, down = step[1], step[2]
                    y = conv(conv(conv(x, names[0], True), names[1], True), names[2], False)
                    x = F.relu(y + (conv(x, down, False) if down else x))
                else:
                    x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
            return F.linear(x, w["fc.weight"], w["fc.bias"])
        return forward

    def efficientnet_lite0():
        w = tensors("efficientnet_lite0")
        plan = models.efficientnet_lite0_layers()

        def conv(x, c):
            lo, hi = c["pads"]
            if lo or hi:
                x = F.pad(x, (lo, hi, lo, hi))     # TF "SAME": the end side may get one more
            y = F.conv2d(x, w[c["prefix"] + "conv.weight"], w[c["prefix"] + "conv.bias"], stride=c["stride"],
                         groups=c["group"])
            return torch.clamp(y, 0, 6) if c["relu6"] else y

        def forward(x):
            for step in plan:
                if step[0] == "block":
                    src = x
                    for c in step[2]:
                        x = conv(x, c)
                    if step[3]:
                        x = x + src
                else:
                    x = conv(x, step[1])
            x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
            return F.linear(x, w["fc.weight"], w["fc.bias"])
        return forward

    if gpu:
        torch.backends.cudnn.benchmark = True
        # fp32 as kiln computes it: torch's default lets cuDNN convolutions use TF32 (10-bit
        # mantissas), which is faster and differs from the fp32 reference by about 1 in the logits
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        note = "torch %s, cuDNN %s, TF32 off, cudnn.benchmark, CUDA events" % (
            torch.__version__, torch.backends.cudnn.version())
    else:
        note = "torch %s on the CPU (%d threads), wall clock" % (torch.__version__, torch.get_num_threads())
    return (torch, {"resnet50": resnet50, "efficientnet_lite0": efficientnet_lite0}, gpu), note


def torch_time(tf, name, x, number, repeat):
    """torch's logits for x and the seconds per run of `repeat` runs of `number` (CUDA
    events on a GPU, the wall clock on the CPU), after 10 warm-up runs."""
    torch, makers, gpu = tf
    forward = makers[name]()
    xt = torch.from_numpy(x).to("cuda" if gpu else "cpu")
    with torch.no_grad():
        out = forward(xt)
        for _ in range(10 if gpu else 1):
            forward(xt)
        if gpu:
            torch.cuda.synchronize()
        runs = []
        for _ in range(repeat):
            if gpu:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
            t0 = time.perf_counter()
            for _ in range(number):
                forward(xt)
            if gpu:
                e.record()
                torch.cuda.synchronize()
                runs.append(s.elapsed_time(e) / 1e3 / number)
            else:
                runs.append((time.perf_counter() - t0) / number)
    return out.cpu().numpy(), runs


def staged_commit():
    """The commit bench/gpu/stage.sh built the binaries from (the copy's own .git may differ)."""
    try:
        with open(os.path.join(ROOT, ".gpu", "commit")) as f:
            return f.read().strip()
    except OSError:
        return None


def run(a):
    import msgpack  # noqa: F401  (kiln needs it)
    import kiln
    tmp, proc, s, dev = connect(a, "kiln-graph-gpu-")
    lines = []
    try:
        lines += ["## Graphs on %s%s (%s UTC, commit %s)" % (
                      a.device, " " + a.label if a.label else "",
                      datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"),
                      staged_commit() or subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                                        capture_output=True, text=True).stdout.strip() or "?"), "",
                  "Device: %s. Command: `bench/gpu/run.sh graph` (`bench/graph_gpu.py run`), payloads staged by "
                  "`bench/graph_gpu.py stage` (onnxruntime's CPU outputs as references)." % dev.name, "",
                  "| model | graph_create cold s | warm s | max abs diff | same top-5 | graph_time median ms "
                  "(min) | peer median ms | kiln / peer |", "|---|---|---|---|---|---|---|---|"]
        tf, tnote = torch_peer(a.device) if not a.no_peer else (None, "not run (--no-peer)")
        checks = []
        for name, payload, uploaded in staged(a.dir, a.models.split(","), s, dev):
            x, ref = np.load(os.path.join(a.dir, name + ".input.npy")), np.load(os.path.join(a.dir, name + ".ref.npy"))
            t0 = time.perf_counter()
            r = s.call("graph_create", device=dev.id, graph=payload)
            cold = time.perf_counter() - t0
            s.call("graph_free", graph=r["graph"])
            t0 = time.perf_counter()
            r = s.call("graph_create", device=dev.id, graph=payload)
            warm = time.perf_counter() - t0
            gid = r["graph"]
            xin = {"input": {"dtype": "float32", "shape": list(x.shape), "data": x.tobytes()}}
            out = s.call("graph_run", graph=gid, inputs=xin)["outputs"][0]
            y = np.frombuffer(out["data"], np.float32).reshape(out["shape"])
            diff = float(np.abs(y - ref).max())
            top5 = list(np.argsort(-y[0])[:5]) == list(np.argsort(-ref[0])[:5])
            t = s.call("graph_time", graph=gid, inputs=xin, number=a.number, repeat=a.repeat)
            peer = "- | -"
            if tf is not None:
                ty, truns = torch_time(tf, name, x, a.number, a.repeat)
                pm = float(np.median(truns))
                bar = " (bar: <= 2x)" if name == "resnet50" else ""
                peer = "%.3f | **%.2fx**%s" % (pm * 1e3, t["median"] / pm, bar)
                # the peer is the same network with the same weights: its logits and kiln's agree
                checks.append("%s: max abs diff torch vs reference %.2g, kiln vs torch %.2g (logits up to %.1f), "
                              "same top-5 as kiln: %s" % (
                                  name, float(np.abs(ty - ref).max()), float(np.abs(y - ty).max()),
                                  float(np.abs(ty).max()), list(np.argsort(-y[0])[:5]) == list(np.argsort(-ty[0])[:5])))
            lines.append("| %s | %.1f | %.3f | %.2g | %s | %.3f (%.3f) | %s |" % (
                name, cold, warm, diff, top5, t["median"] * 1e3, t["min"] * 1e3, peer))
            s.call("graph_free", graph=gid)
            for t in uploaded:
                t.free()
        if checks:
            tnote += "; " + "; ".join(checks)
        lines += ["", "Peer: %s." % tnote]
        import graph_bench

        class A:
            repeat = a.repeat
        lines += graph_bench.tiny(s, dev, A)
        if proc:
            lines += capture_notes(tmp)
    finally:
        finish(proc, lines, a.out)


def connect(a, prefix):
    """(scratch dir, the private kilnd or None, session, device): a.url's daemon, else one
    started for the run."""
    import kiln
    tmp = tempfile.mkdtemp(prefix=prefix)
    proc, url = (None, a.url) if a.url else start_kilnd(tmp)
    s = kiln.connect(url)
    return tmp, proc, s, s.device(a.device)


def finish(proc, lines, out):
    """Stops the private kilnd (if one was started), prints the section, appends it to out."""
    if proc:
        proc.terminate()
        proc.wait(10)
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        with open(out, "a") as f:
            f.write("\n" + text)


def capture_notes(tmp):
    """What kilnd's log says about CUDA graph capture (device/cuda/seq.c): failures are warned."""
    try:
        log = open(os.path.join(tmp, "kilnd.log")).read().splitlines()
    except OSError:
        return []
    failed = [l for l in log if "cuda_graph_capture_failed" in l or "graph_sequence_failed" in l]
    mode = ("launch by launch (KILN_GRAPH_SEQUENCE=0)" if os.environ.get("KILN_GRAPH_SEQUENCE") == "0" else
            "stream launches (KILN_CUDA_GRAPHS=0)" if os.environ.get("KILN_CUDA_GRAPHS") == "0" else
            "launch sequences without per-node marks (KILN_GRAPH_MARKS=0)" if os.environ.get("KILN_GRAPH_MARKS") == "0"
            else "launch sequences, CUDA graphs where capture works")
    out = ["", "Graph runs: %s; kilnd log: %s." % (mode, "%d capture or sequence failures, e.g. `%s`"
                                                   % (len(failed), failed[0][:300]) if failed else
                                                   "no capture or sequence failure")]
    return out


def role(shape_w, out_shape):
    """A node's kind from its weight's shape (O x C x kh x kw, or O x C for a 1x1 conv as a
    GEMM) and its output's spatial size."""
    hw = "x".join(str(d) for d in out_shape[2:]) if len(out_shape) > 2 else "-"
    if shape_w is None:
        return "other (pool, add, ...)"
    if len(out_shape) == 2:
        return "fc (GEMM)"
    if len(shape_w) == 2:
        return "1x1 conv (GEMM) -> %s" % hw
    if shape_w[1] == 1 and shape_w[2] > 1:
        return "%dx%d depthwise -> %s" % (shape_w[2], shape_w[3], hw)
    return "%dx%d conv -> %s" % (shape_w[2], shape_w[3], hw)


def profile(a):
    """Each kernel of a staged graph timed alone by kilnd's `time` (device clock), its
    arguments as the graph leaves them (every value its own tensor), beside graph_time of the
    whole graph: where the time goes, and what the run adds between kernels."""
    import msgpack
    import kiln
    from kiln.te.build import eval_wire
    tmp, proc, s, dev = connect(a, "kiln-graph-prof-")
    lines = []
    try:
        for name, payload, uploaded in staged(a.dir, a.models.split(","), s, dev):
            x = np.load(os.path.join(a.dir, name + ".input.npy"))
            g = msgpack.unpackb(payload, raw=False)
            r = s.call("graph_create", device=dev.id, graph=payload)
            xin = {g["inputs"][0]["name"]: {"dtype": "float32", "shape": list(x.shape), "data": x.tobytes()}}
            whole = s.call("graph_time", graph=r["graph"], inputs=xin, number=a.number, repeat=a.repeat)
            s.call("graph_free", graph=r["graph"])
            mods = s.compile_batch([{"ir": p["ir"], "target": dev.id, "format": p.get("format", "te")}
                                    for p in g["programs"]])
            decl = {}
            for v in g["inputs"] + g["values"]:
                decl[v["name"]] = (v["dtype"], tuple(v["shape"]))
            tensors, shapes = {}, {}
            for c in g["constants"]:
                if "id" in c:
                    shapes[c["name"]] = tuple(c["shape"])
                    tensors[c["name"]] = c["id"]
                else:
                    t = c["tensor"]
                    arr = np.frombuffer(t["data"], t["dtype"]).reshape(t["shape"])
                    nt = kiln.nd.array(np.ascontiguousarray(arr), dev)
                    uploaded.append(nt)
                    tensors[c["name"]], shapes[c["name"]] = nt.id, tuple(t["shape"])
            for n, (dt, shape) in decl.items():
                nt = kiln.nd.array(x, dev) if n == g["inputs"][0]["name"] else kiln.nd.empty(shape or (1,), dt, dev)
                uploaded.append(nt)
                tensors[n], shapes[n] = nt.id, shape
            base = {}
            for v in g["views"]:
                base[v["name"]] = base.get(v["of"], v["of"])
                shapes[v["name"]] = tuple(v["shape"])
            rows = []
            for node in g["nodes"]:
                mod = mods[node["program"]]
                total = 0.0
                wshape, out_shape, geo = None, None, ""
                for l in node["launches"]:
                    args = []
                    for arg in l["args"]:
                        if isinstance(arg, dict):
                            nm = arg["value"]
                            args.append({"tensor": tensors[base.get(nm, nm)]})
                            src = base.get(nm, nm)
                            if any(c["name"] == src for c in g["constants"]) and len(shapes[nm]) in (2, 4) and \
                                    wshape is None and np.prod(shapes[nm]) > 64:
                                wshape = shapes[nm]
                            out_shape = shapes[nm]
                        else:
                            args.append(arg)
                    k = mod.kernel(l["kernel"])
                    rec = k.info["launch"]
                    grid = l.get("grid") or [eval_wire(e, {}) for e in rec["grid"]]
                    block = l.get("block") or [eval_wire(e, {}) for e in rec["block"]]
                    if min(grid) < 1 or min(block) < 1:
                        continue
                    t = s.call("time", module=mod.id, kernel=l["kernel"], device=dev.id, grid=grid, block=block,
                               args=args, number=a.number, repeat=a.repeat)
                    total += min(t["results"])
                    geo = "grid %s block %s" % ("x".join(map(str, grid)), "x".join(map(str, block)))
                rows.append((total, node.get("label", node["name"]), role(wshape, out_shape or ()), geo))
            for t in uploaded:
                t.free()
            ksum = sum(r[0] for r in rows)
            groups = {}
            for t, _, ro, _ in rows:
                gr = groups.setdefault(ro, [0, 0.0])
                gr[0] += 1
                gr[1] += t
            lines += ["## Per-kernel profile of %s on %s (%s UTC, commit %s)" % (
                          name, dev.name, datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"),
                          staged_commit() or "?"), "",
                      "Each kernel timed alone by `time` (number %d, repeat %d: the minimum), its inputs as the "
                      "graph leaves them; command: `bench/gpu/run.sh graphprof` (`bench/graph_gpu.py profile`)."
                      % (a.number, a.repeat), "",
                      "| measurement | ms |", "|---|---|",
                      "| graph_time median (min) | %.3f (%.3f) |" % (whole["median"] * 1e3, whole["min"] * 1e3),
                      "| sum of the %d kernels alone | %.3f |" % (len(rows), ksum * 1e3),
                      "| graph run - kernels alone (launch gaps; weights from HBM, where a kernel timed alone finds them in L2) | %.3f |" % ((whole["min"] - ksum) * 1e3), "",
                      "| kernels | n | ms | share |", "|---|---|---|---|"]
            for ro, (n, t) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
                lines.append("| %s | %d | %.3f | %.0f%% |" % (ro, n, t * 1e3, 100 * t / ksum if ksum else 0))
            lines += ["", "Slowest kernels (ms, kind, geometry, node):", ""]
            for t, label, ro, geo in sorted(rows, reverse=True)[:a.top]:
                lines.append("- %.3f  %s  %s  %s" % (t * 1e3, ro, geo, label))
            lines.append("")
    finally:
        finish(proc, lines, a.out)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("stage")
    st.add_argument("dir")
    st.add_argument("--target", default="gpu", help="gpu (default), or cpu to try the steps here")
    st.add_argument("--models", default=",".join(MODELS))
    rn = sub.add_parser("run")
    rn.add_argument("dir")
    rn.add_argument("--device", default="cuda:0")
    rn.add_argument("--url")
    rn.add_argument("--number", type=int, default=20)
    rn.add_argument("--repeat", type=int, default=5)
    rn.add_argument("--out")
    rn.add_argument("--label", default="", help="words after the device in the heading (the mode measured)")
    rn.add_argument("--no-peer", action="store_true", help="leave torch out (a second run in another mode)")
    rn.add_argument("--models", default=",".join(MODELS))
    pf = sub.add_parser("profile")
    pf.add_argument("dir")
    pf.add_argument("--device", default="cuda:0")
    pf.add_argument("--url")
    pf.add_argument("--models", default="resnet50")
    pf.add_argument("--number", type=int, default=20)
    pf.add_argument("--repeat", type=int, default=5)
    pf.add_argument("--top", type=int, default=20)
    pf.add_argument("--out")
    a = ap.parse_args()
    {"stage": stage, "run": run, "profile": profile}[a.cmd](a)


if __name__ == "__main__":
    main()
