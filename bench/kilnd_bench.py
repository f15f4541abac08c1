#!/usr/bin/python3
"""Compile and launch through kilnd (issue 3 "Performance", issue 7 launch round trip).

    /usr/bin/python3 bench/kilnd_bench.py [--out bench/results/compile.md] [--quick]

Starts its own kilnd instances (KILND, else build/server/kilnd), each on a unix socket in a
fresh temporary directory with its own cache directory, and stops them when done. Talks to
them with a bare msgpack + blocking socket client (no reader thread), one request at a time,
so a round trip is the daemon's time plus one socket write and read. Measures:

  (a) compile of the dialect's vector add (clients/python/examples/vadd.ll) with a fresh
      comment salt each time (a cache miss) to gfx942, sm_90 and cpu: round trip and the
      server-reported compile_ms, p50/p90 (--miss-runs, >= 30);
  (b) compile of one cached payload, round trip p50/p99 (--hit-runs, >= 2000), with a
      `ping` round trip beside it as the floor;
  (c) first compile after a restart (disk hit): payloads compiled by one kilnd, then for each
      one a new kilnd on the same cache directory, and the first compile's round trip;
  (d) compile_batch of 256 distinct variants of a tiled GEMM written in C with kiln/kernel.h
      (bench/kernels/gemm_tiled.c; RM, RN, TK, UNROLL as -D defines; bitcode made with clang
      before any timing), wall time with --compile-workers 1 and 2 (fresh cache each run);
  (e) launch round trip of a 1-element vector add on cpu:0 (--launch-runs, >= 2000).

Nothing here is hard-coded: every number in the report comes from this run.
"""

import argparse
import concurrent.futures
import datetime
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import msgpack  # noqa: E402

from kiln.daemon import find_kilnd, start_daemon  # noqa: E402

CLANG = os.environ.get("CLANG", "/usr/lib/llvm-22/bin/clang")
VADD = os.path.join(ROOT, "clients", "python", "examples", "vadd.ll")
GEMM = os.path.join(ROOT, "bench", "kernels", "gemm_tiled.c")
TARGETS = ["gfx942", "sm_90", "cpu"]
# Issue 3 bars (ms) for a vector add miss, per target.
MISS_BAR_MS = {"gfx942": 15.0, "sm_90": 10.0, "cpu": 15.0}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


class KilnError(Exception):
    pass


class Client:
    """Synchronous msgpack-rpc over a unix socket: one request in flight."""

    def __init__(self, url):
        kind, _, path = url.partition(":")
        assert kind == "unix", url
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(600)
        self.sock.connect(path)
        self.up = msgpack.Unpacker(raw=False, max_buffer_size=1 << 30)
        self.msgid = 0

    def call(self, method, params):
        self.msgid = (self.msgid + 1) & 0xFFFFFFFF
        self.sock.sendall(msgpack.packb([0, self.msgid, method, [params]], use_bin_type=True))
        while True:
            try:
                msg = self.up.unpack()
                break
            except msgpack.OutOfData:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    raise KilnError("kilnd closed the connection")
                self.up.feed(chunk)
        _, mid, err, res = msg
        if mid != self.msgid:
            raise KilnError("unexpected msgid %r" % (mid,))
        if err is not None:
            raise KilnError("%s: %r" % (method, err))
        return res

    def close(self):
        self.sock.close()


def start(cache_dir, workers=None, devices=None, extra=()):
    args = list(extra)
    if workers is not None:
        args += ["--compile-workers", str(workers)]
    if devices:
        args += ["--devices", devices]
    return start_daemon(cache_dir=cache_dir, args=args, log_level="warn")


def machine():
    model, cores = "?", len(os.sched_getaffinity(0))  # the cores this run may use (taskset)
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            k, _, v = line.partition(":")
            if k.strip() == "Model name":
                model = v.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return model, cores


def git_rev():
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + (" (working tree with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def verdict(ok):
    return "**met**" if ok else "**not met**"


# --- (a) misses -------------------------------------------------------------------------------

def bench_miss(base_ir, runs, say, tmp):
    d = start(os.path.join(tmp, "cache-miss"))
    out = {}
    try:
        c = Client(d.url)
        salt = 0
        for tgt in TARGETS:
            for _ in range(3):  # warm: the worker's first job for a target loads its libraries
                salt += 1
                c.call("compile", {"ir": ("; warm %d\n" % salt) + base_ir, "target": tgt})
            rts, cms = [], []
            for _ in range(runs):
                salt += 1
                ir = ("; salt %d\n" % salt) + base_ir
                t = time.perf_counter()
                r = c.call("compile", {"ir": ir, "target": tgt})
                rts.append((time.perf_counter() - t) * 1e3)
                if r["cached"]:
                    raise KilnError("salted payload was a cache hit: the salt does not change the key")
                cms.append(r["compile_ms"])
            over = [a - b for a, b in zip(rts, cms)]
            out[tgt] = dict(rt50=pct(rts, 50), rt90=pct(rts, 90), cm50=pct(cms, 50), cm90=pct(cms, 90),
                            ov50=pct(over, 50), ov90=pct(over, 90), n=runs)
            say("  %s: round trip p50 %.2f ms p90 %.2f ms; compile_ms p50 %.2f p90 %.2f" %
                (tgt, out[tgt]["rt50"], out[tgt]["rt90"], out[tgt]["cm50"], out[tgt]["cm90"]))
        c.close()
    finally:
        d.stop()
    return out


# --- (b) hits ---------------------------------------------------------------------------------

def bench_hit(base_ir, runs, say, tmp):
    d = start(os.path.join(tmp, "cache-hit"))
    try:
        c = Client(d.url)
        params = {"ir": base_ir, "target": "gfx942"}
        r = c.call("compile", params)
        for _ in range(200):
            r = c.call("compile", params)
        if not r["cached"]:
            raise KilnError("repeated payload was not a cache hit")
        ts = []
        for _ in range(runs):
            t = time.perf_counter()
            r = c.call("compile", params)
            ts.append((time.perf_counter() - t) * 1e6)
        assert r["cached"]
        pings = []
        for _ in range(200):
            c.call("ping", {})
        for _ in range(runs):
            t = time.perf_counter()
            c.call("ping", {})
            pings.append((time.perf_counter() - t) * 1e6)
        c.close()
    finally:
        d.stop()
    res = dict(p50=pct(ts, 50), p99=pct(ts, 99), ping50=pct(pings, 50), ping99=pct(pings, 99), n=runs,
               ir_bytes=len(base_ir.encode()))
    say("  cached compile: p50 %.1f us p99 %.1f us (ping p50 %.1f us)" % (res["p50"], res["p99"], res["ping50"]))
    return res


# --- (c) restart (disk hit) ---------------------------------------------------------------------

def bench_restart(base_ir, runs, say, tmp):
    cache = os.path.join(tmp, "cache-restart")
    payloads = [("; restart %d\n" % i) + base_ir for i in range(runs)]
    d = start(cache)
    try:
        c = Client(d.url)
        for p in payloads:
            r = c.call("compile", {"ir": p, "target": "gfx942"})
            assert not r["cached"]
        c.close()
    finally:
        d.stop()
    firsts, starts, connects = [], [], []
    for p in payloads:
        t0 = time.perf_counter()
        d = start(cache)
        starts.append((time.perf_counter() - t0) * 1e3)
        try:
            t1 = time.perf_counter()
            c = Client(d.url)
            connects.append((time.perf_counter() - t1) * 1e3)
            t = time.perf_counter()
            r = c.call("compile", {"ir": p, "target": "gfx942"})
            firsts.append((time.perf_counter() - t) * 1e3)
            if not r["cached"]:
                raise KilnError("first compile after restart was not a cache hit")
            st = c.call("stats", {})
            if st.get("cache", {}).get("hits_disk", 0) < 1:
                raise KilnError("first compile after restart did not count as a disk hit: %r" % st.get("cache"))
            c.close()
        finally:
            d.stop()
    res = dict(p50=pct(firsts, 50), p90=pct(firsts, 90), mx=max(firsts), n=len(firsts),
               start50=pct(starts, 50), connect50=pct(connects, 50), all=firsts)
    say("  first compile after restart: p50 %.3f ms p90 %.3f ms max %.3f ms" % (res["p50"], res["p90"], res["mx"]))
    return res


# --- (d) compile_batch ----------------------------------------------------------------------------

def gemm_variants():
    out = []
    for rm in (1, 2, 4, 8):
        for rn in (1, 2, 4, 8):
            for tk in (4, 8, 16, 32):
                for un in (1, 2, 4, 8):
                    out.append((rm, rn, tk, un))
    return out


def build_gemm(tmp, say, keep_dir=None):
    vs = gemm_variants()
    outdir = keep_dir or os.path.join(tmp, "gemm")
    os.makedirs(outdir, exist_ok=True)

    def one(v):
        rm, rn, tk, un = v
        path = os.path.join(outdir, "gemm_%d_%d_%d_%d.bc" % v)
        if keep_dir and os.path.exists(path):  # made by an earlier run (or on a machine with clang)
            with open(path, "rb") as f:
                return f.read()
        subprocess.run([CLANG, "-O2", "-emit-llvm", "-c", "-I", os.path.join(ROOT, "clients", "include"),
                        "-DRM=%d" % rm, "-DRN=%d" % rn, "-DTK=%d" % tk, "-DUNROLL=%d" % un, GEMM, "-o", path],
                       check=True, timeout=120)
        with open(path, "rb") as f:
            return f.read()

    t = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        bcs = list(ex.map(one, vs))
    if len(set(bcs)) != len(bcs):
        raise KilnError("GEMM variants are not all distinct payloads")
    say("  built %d GEMM bitcode variants in %.1f s (%d-%d bytes)" %
        (len(bcs), time.perf_counter() - t, min(map(len, bcs)), max(map(len, bcs))))
    return bcs


def bench_batch(bcs, target, reps, say, tmp, warm_ir):
    res = {}
    for workers in (1, 2):
        walls, cms = [], []
        for rep in range(reps):
            d = start(os.path.join(tmp, "cache-batch-%d-%d-%s" % (workers, rep, target)), workers=workers)
            try:
                c = Client(d.url)
                st = c.call("stats", {})
                if st["compile"]["workers"] != workers:
                    raise KilnError("kilnd reports %r compile workers, asked for %d" %
                                    (st["compile"]["workers"], workers))
                # Warm every worker for this target (distinct payloads, so none is a hit).
                for i in range(2 * workers):
                    c.call("compile", {"ir": ("; batch warm %d\n" % i) + warm_ir, "target": target})
                items = [{"ir": bc, "target": target} for bc in bcs]
                t = time.perf_counter()
                r = c.call("compile_batch", {"items": items})
                walls.append(time.perf_counter() - t)
                errs = [x for x in r if "error" in x]
                if errs:
                    raise KilnError("%d batch items failed, first: %r" % (len(errs), errs[0]["error"]))
                if any(x["cached"] for x in r):
                    raise KilnError("batch item was cached in a fresh cache")
                cms.append(sum(x["compile_ms"] for x in r) / 1e3)
                c.close()
            finally:
                d.stop()
        res[workers] = dict(wall=min(walls), walls=walls, cpu=sum(cms) / len(cms))
        say("  %s compile_batch of %d, %d worker(s): wall %s s (sum of compile_ms %.2f s)" %
            (target, len(bcs), workers, ", ".join("%.2f" % w for w in walls), res[workers]["cpu"]))
    res["ratio"] = res[1]["wall"] / res[2]["wall"]
    res["ratios"] = [a / b for a, b in zip(res[1]["walls"], res[2]["walls"])]
    return res


# --- (e) launch -------------------------------------------------------------------------------

def bench_launch(base_ir, runs, say, tmp):
    d = start(os.path.join(tmp, "cache-launch"), devices="cpu")
    try:
        c = Client(d.url)
        m = c.call("compile", {"ir": base_ir, "target": "cpu"})
        ids = [c.call("alloc", {"device": "cpu:0", "dtype": "float32", "shape": [1]})["id"] for _ in range(3)]
        c.call("write", {"id": ids[0], "data": b"\x00\x00\x80\x3f"})  # 1.0f
        c.call("write", {"id": ids[1], "data": b"\x00\x00\x00\x40"})  # 2.0f
        params = {"module": m["module"], "kernel": m["kernels"][0]["name"], "device": "cpu:0", "grid": [1],
                  "block": [1], "args": [{"tensor": ids[0]}, {"tensor": ids[1]}, {"tensor": ids[2]}, 1]}
        for _ in range(200):
            c.call("launch", params)
        got = c.call("read", {"id": ids[2]})
        if bytes(got) != b"\x00\x00\x40\x40":
            raise KilnError("vadd on cpu:0 gave %r, expected 3.0f" % (bytes(got),))
        ts, el = [], []
        for _ in range(runs):
            t = time.perf_counter()
            r = c.call("launch", params)
            ts.append((time.perf_counter() - t) * 1e6)
            el.append(r["elapsed"] * 1e6)
        pings = []
        for _ in range(runs):
            t = time.perf_counter()
            c.call("ping", {})
            pings.append((time.perf_counter() - t) * 1e6)
        c.close()
    finally:
        d.stop()
    res = dict(p50=pct(ts, 50), p99=pct(ts, 99), el50=pct(el, 50), ping50=pct(pings, 50), n=runs)
    say("  launch: p50 %.1f us p99 %.1f us (kernel elapsed p50 %.2f us, ping p50 %.1f us)" %
        (res["p50"], res["p99"], res["el50"], res["ping50"]))
    return res


# --- report -----------------------------------------------------------------------------------

def report(args, info, A, B, C, D, E):
    L = []
    w = L.append
    w("# kilnd compile and launch benchmarks")
    w("")
    w("Issue 3 \"Performance\" measured through kilnd (not the compile library alone), plus the")
    w("issue 7 launch round trip. `bench/kilnd_bench.py`; every number below comes from one run of it.")
    w("")
    w("## %s" % info["date"])
    w("")
    w("- Machine: %s, %d cores; Linux %s; Python %s, msgpack %s." %
      (info["model"], info["cores"], platform.release(), platform.python_version(), msgpack.version_str
       if hasattr(msgpack, "version_str") else ".".join(map(str, msgpack.version))))
    w("- kilnd: `%s`, commit %s. Client: bare msgpack over a unix socket, one request in flight." %
      (os.path.relpath(info["kilnd"], ROOT), info["rev"]))
    w("- Load average (1/5/15 min): before %s, after %s." % (info["load_before"], info["load_after"]))
    w("- Wall time of the whole run: %.0f s." % info["wall"])
    w("")
    w("### (a) Vector add, cache miss (fresh comment salt each time), warm worker")
    w("")
    w("%d runs per target after 3 warm-up compiles; default `--compile-workers` (%d). Round trip is" % (args.miss_runs, info["cores"]))
    w("what the client sees; `compile_ms` is what kilnd reports the compiler spent; the rest is")
    w("kilnd outside the compiler (hashing, queueing, the worker channel, the cache write) plus the socket.")
    w("")
    w("| target | bar (p50) | round trip p50 | p90 | compile_ms p50 | p90 | outside compiler p50 | verdict |")
    w("|---|---|---|---|---|---|---|---|")
    for t in TARGETS:
        a = A[t]
        w("| %s | <= %.0f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %s |" %
          (t, MISS_BAR_MS[t], a["rt50"], a["rt90"], a["cm50"], a["cm90"], a["ov50"],
           verdict(a["rt50"] <= MISS_BAR_MS[t])))
    w("")
    w("### (b) Cached `compile` round trip")
    w("")
    w("The same vadd payload (%d bytes of IR text, target gfx942) %d times after 200 warm-ups." % (B["ir_bytes"], B["n"]))
    w("")
    w("- round trip: p50 %.1f us, p99 %.1f us — bar p50 <= 60 us: %s" % (B["p50"], B["p99"], verdict(B["p50"] <= 60)))
    w("- `ping` on the same connection, for the floor: p50 %.1f us, p99 %.1f us" % (B["ping50"], B["ping99"]))
    w("")
    w("### (c) First `compile` after a restart (disk hit)")
    w("")
    w("%d vadd payloads compiled for gfx942 by one kilnd; then, for each payload, a new kilnd on the" % C["n"])
    w("same cache directory, and the round trip of its first request, a `compile` of that payload")
    w("(checked: `cached` true and `stats.cache.hits_disk` >= 1).")
    w("")
    w("- first compile round trip: p50 %.3f ms, p90 %.3f ms, max %.3f ms — bar <= 2 ms: %s" %
      (C["p50"], C["p90"], C["mx"], verdict(C["mx"] <= 2.0)))
    w("- all: %s ms" % ", ".join("%.3f" % x for x in C["all"]))
    w("- for context, not part of the bar: kilnd start to ready p50 %.1f ms, connect p50 %.3f ms" %
      (C["start50"], C["connect50"]))
    w("")
    w("### (d) `compile_batch` of 256 tiled GEMM variants, 1 vs 2 compile workers")
    w("")
    w("`bench/kernels/gemm_tiled.c` (kiln/kernel.h) built with `clang -O2 -emit-llvm -c` for every")
    w("RM, RN in {1,2,4,8}, TK in {4,8,16,32}, UNROLL in {1,2,4,8}: 256 distinct bitcode payloads,")
    w("made before timing. One `compile_batch` request of all 256 to a fresh kilnd (fresh cache) whose")
    w("workers were warmed for the target; %d run(s) per setting, best wall time used." % args.batch_reps)
    w("")
    w("| target | 1 worker wall | 2 workers wall | ratio (best) | ratios per run | sum of compile_ms (1 / 2) | bar | verdict |")
    w("|---|---|---|---|---|---|---|---|")
    for tgt, d in D.items():
        w("| %s | %s s | %s s | %.2fx | %s | %.2f s / %.2f s | >= 1.8x | %s |" %
          (tgt, ", ".join("%.2f" % x for x in d[1]["walls"]), ", ".join("%.2f" % x for x in d[2]["walls"]),
           d["ratio"], ", ".join("%.2fx" % x for x in d["ratios"]), d[1]["cpu"], d[2]["cpu"],
           verdict(d["ratio"] >= 1.8)))
    w("")
    w("### (e) `launch` round trip of a tiny kernel (issue 7)")
    w("")
    w("vadd of 1 float on cpu:0 (grid [1], block [1], result checked), %d round trips after 200 warm-ups." % E["n"])
    w("")
    w("- round trip: p50 %.1f us, p99 %.1f us — bar p50 <= 50 us: %s" % (E["p50"], E["p99"], verdict(E["p50"] <= 50)))
    w("- kernel `elapsed` p50 %.2f us; `ping` on the same connection p50 %.1f us" % (E["el50"], E["ping50"]))
    w("- issue 4 (cached `launch` from the Python `kiln` package, p50 <= 150 us) is in bench/results/python.md.")
    w("")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the markdown report here")
    ap.add_argument("--miss-runs", type=int, default=40)
    ap.add_argument("--hit-runs", type=int, default=5000)
    ap.add_argument("--restarts", type=int, default=12)
    ap.add_argument("--launch-runs", type=int, default=5000)
    ap.add_argument("--batch-reps", type=int, default=2)
    ap.add_argument("--batch-targets", default="gfx942,cpu", help="comma-separated targets for (d)")
    ap.add_argument("--only", default="abcde", help="which parts to run, e.g. 'de'")
    ap.add_argument("--gemm-dir", help="keep the GEMM bitcode variants here and reuse those present "
                    "(for machines without clang)")
    args = ap.parse_args()

    kilnd = find_kilnd()
    if not kilnd:
        sys.exit("no kilnd: build the tree or set KILND")
    base_ir = open(VADD).read()
    model, cores = machine()
    info = dict(date=datetime.date.today().isoformat(), model=model, cores=cores, kilnd=kilnd, rev=git_rev(),
                load_before=loadavg())
    t0 = time.perf_counter()

    def say(s):
        print(s, flush=True)

    tmp = tempfile.mkdtemp(prefix="kilnd-bench-")
    A = B = C = E = None
    D = {}
    try:
        if "a" in args.only:
            say("(a) misses")
            A = bench_miss(base_ir, args.miss_runs, say, tmp)
        if "b" in args.only:
            say("(b) cached compile")
            B = bench_hit(base_ir, args.hit_runs, say, tmp)
        if "c" in args.only:
            say("(c) restart")
            C = bench_restart(base_ir, args.restarts, say, tmp)
        if "d" in args.only:
            say("(d) compile_batch")
            bcs = build_gemm(tmp, say, args.gemm_dir)
            for tgt in args.batch_targets.split(","):
                D[tgt] = bench_batch(bcs, tgt, args.batch_reps, say, tmp, base_ir)
        if "e" in args.only:
            say("(e) launch")
            E = bench_launch(base_ir, args.launch_runs, say, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    info["load_after"] = loadavg()
    info["wall"] = time.perf_counter() - t0
    say("load average before %s, after %s" % (info["load_before"], info["load_after"]))
    if args.out:
        if args.only != "abcde":
            sys.exit("--out needs every part (--only abcde)")
        with open(args.out, "w") as f:
            f.write(report(args, info, A, B, C, D, E))
        say("wrote %s" % args.out)


if __name__ == "__main__":
    main()
