#!/usr/bin/python3
"""Load and chaos test of kilnd (issue 5): 64 connections over 4 tenants, loopback only.

  tenant1  pipelines pings and tensor round trips (upload, download, free; 64 KiB)
  tenant2  floods compile_batch (8 fresh kernels per batch, target cpu)
  tenant3  sends random malformed traffic (garbage, broken msgpack, bad params, unknown
           methods, mutated requests, half messages), reconnecting as kilnd closes on it
  tenant4  launches kernels on cpu:0, every 10th one a kernel that faults

First tenant 1 runs alone (--alone seconds), then all four together (--seconds, 60). Checks:
tenants 1 and 2 see zero errors; tenant 1's p99 under chaos is within 5x of its p99 alone;
kilnd's RSS and fd count end where they started; every worker death is in `stats` and in
the metrics endpoint. Writes bench/results/chaos.md (or --out) and exits 1 if a check fails.

Each tenant is one client process (fork) with 16 threads, one connection each.
Run with Debian's python3 (python3-msgpack):  bench/chaos.py [--kilnd build/server/kilnd]
"""
import argparse
import datetime
import multiprocessing as mp
import os
import platform
import random
import secrets
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import kiln  # noqa: E402
import msgpack  # noqa: E402

CONNS_PER_TENANT = 16
DEPTH = 4  # tenant 1 requests in flight per connection
E_DEVICE_FAULT, E_NOT_FOUND = 10, 5

VADD = open(os.path.join(ROOT, "clients", "python", "examples", "vadd.ll")).read()
SPIN = """
define void @spin(ptr %p, i32 %n) section "kiln.kernel" {
entry:
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i1, %loop]
  %v = load volatile i32, ptr %p
  %v1 = add i32 %v, 1
  store volatile i32 %v1, ptr %p
  %i1 = add i32 %i, 1
  %more = icmp ult i32 %i1, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""
FAULT = """
define void @boom(ptr %p) section "kiln.kernel" {
  store volatile i32 1, ptr null
  ret void
}
"""


def pct(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


# --- tenants (each runs in its own process; threads are its connections) -------------------

def tenant1_conn(url, token, deadline, out):
    """Pings and tensor round trips, DEPTH in flight: each round submits DEPTH requests
    (ping, ping, upload, download of the previous upload) and waits for all of them."""
    s = kiln.connect(url, token=token)
    data = bytes(64 << 10)
    tensor = {"dtype": "uint8", "shape": [len(data)], "data": data}
    lat, errors, prev = out["lat"], out["errors"], None

    def timed(fut, kind, t0):
        def done(f):
            lat.append((kind, time.perf_counter() - t0))
        fut.add_done_callback(done)
        return fut

    while time.monotonic() < deadline:
        t0 = time.perf_counter()
        futs = [timed(s.ping_async(), "ping", t0), timed(s.ping_async(), "ping", t0),
                timed(s.call_async("upload", device="cpu:0", tensor=tensor), "upload", t0)]
        if prev is not None:
            futs.append(timed(s.call_async("download", id=prev), "download", t0))
        new = None
        for i, f in enumerate(futs):
            try:
                r = f.result(60)
                if i == 2:
                    new = r["id"]
            except kiln.KilnError as e:
                errors.append(str(e))
        if prev is not None:
            try:
                s.call("free", id=prev)
            except kiln.KilnError as e:
                errors.append(str(e))
        prev = new
    if prev is not None:
        s.call("free", id=prev)
    s.close()


def tenant2_conn(url, token, deadline, out, salt):
    s = kiln.connect(url, token=token)
    n = 0
    while time.monotonic() < deadline:
        items = [{"ir": "; chaos %s %d\n%s" % (salt, n + i, VADD), "target": "cpu"} for i in range(8)]
        n += 8
        t0 = time.perf_counter()
        try:
            res = s.call("compile_batch", items=items)
            out["lat"].append(("compile_batch", time.perf_counter() - t0))
            for r in res:
                if "error" in r:
                    out["errors"].append(str(r["error"]))
            out["items"].append(len(res))
        except kiln.KilnError as e:
            out["errors"].append(str(e))
    s.close()


def malformed(rng, token):
    """One piece of bad traffic and whether kilnd should close the connection after it."""
    kind = rng.randrange(8)
    pk = msgpack.packb
    if kind == 0:
        return "garbage", bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 64))), True
    if kind == 1:
        return "unknown_method", pk([0, 7, "no_such_%d" % rng.randrange(100), [{}]]), False
    if kind == 2:
        bad = rng.choice([{"ir": 5}, {"ir": b""}, {"ir": "x", "target": 3}, {"ir": "x", "colour": 1},
                          {"ir": "x", "options": {"opt_level": 9}}])
        return "bad_compile", pk([0, 7, "compile", [bad]]), False
    if kind == 3:
        bad = rng.choice([{"module": "00" * 32, "kernel": "k", "grid": [0], "block": [1], "args": []},
                          {"module": 1}, {"kernel": "k"}, {"module": "zz", "kernel": "k", "grid": ["a"],
                                                           "block": [1], "args": []}])
        return "bad_launch", pk([0, 7, "launch", [bad]]), False
    if kind == 4:
        return "huge_header", b"\xdd\xff\xff\xff\xff" + b"\xc0" * 8, True
    if kind == 5:
        return "deep", b"\x91" * 200, True
    if kind == 6:
        m = bytearray(pk([0, 7, "upload", [{"device": "cpu:0", "tensor": {"dtype": "float32", "shape": [4],
                                                                          "data": bytes(16)}}]]))
        for _ in range(rng.randrange(1, 4)):
            m[rng.randrange(len(m))] = rng.getrandbits(8)
        return "mutated", bytes(m), None  # may still be valid, or not
    return "not_rpc", pk({"a": [1, 2, 3]}), True


def tenant3_conn(url, token, deadline, out, seed):
    host, port = url[4:].rsplit(":", 1)
    rng = random.Random(seed)
    counts = out["counts"]

    def bump(k):
        counts[k] = counts.get(k, 0) + 1

    sock, unpacker = None, None
    while time.monotonic() < deadline:
        if sock is None:
            sock = socket.create_connection((host, int(port)), timeout=10)
            unpacker = msgpack.Unpacker(raw=False)
            sock.sendall(msgpack.packb([0, 1, "hello", [{"version": 1, "token": token, "client": "chaos"}]]))
        kind, data, closes = malformed(rng, token)
        bump("sent_" + kind)
        try:
            sock.sendall(data)
            got = None
            t_end = time.monotonic() + 2
            while got is None and time.monotonic() < t_end:
                chunk = sock.recv(65536)
                if not chunk:
                    got = "closed"
                    break
                unpacker.feed(chunk)
                for msg in unpacker:
                    if isinstance(msg, list) and len(msg) == 4 and msg[0] == 1 and msg[1] == 7:
                        got = "error" if msg[2] else "ok"
            bump("reply_" + (got or "none"))
            if got == "error" and closes:
                # kilnd answers a framing error and then closes: see the close.
                sock.settimeout(5)
                try:
                    while sock.recv(65536):
                        pass
                    bump("closed_after_error")
                except socket.timeout:
                    bump("still_open_after_framing_error")
            if got in ("closed", None) or (got == "error" and closes):
                sock.close()
                sock = None
        except (ConnectionError, socket.timeout, OSError):
            bump("reset")
            sock.close()
            sock = None
        # Half a message now and then: send it and go.
        if sock is not None and rng.random() < 0.05:
            sock.sendall(msgpack.packb([0, 9, "upload", [{"tensor": {"data": bytes(4096)}}]])[:100])
            sock.close()
            sock = None
            bump("sent_half_message")
    if sock is not None:
        sock.close()


def tenant4_conn(url, token, deadline, out, idx):
    s = kiln.connect(url, token=token)
    spin = s.call("compile", ir=SPIN, target="cpu")["module"]
    boom = s.call("compile", ir=FAULT, target="cpu")["module"]
    counts = out["counts"]
    tid, i = None, 0

    def bump(k):
        counts[k] = counts.get(k, 0) + 1

    while time.monotonic() < deadline:
        if tid is None:
            try:
                tid = s.call("upload", device="cpu:0",
                             tensor={"dtype": "int32", "shape": [4], "data": bytes(16)})["id"]
            except kiln.KilnError as e:
                bump("upload_error_%d" % e.code)
                continue
        i += 1
        faulty = i % 10 == 0
        params = {"module": boom if faulty else spin, "kernel": "boom" if faulty else "spin",
                  "device": "cpu:0", "grid": [1], "block": [1],
                  "args": [{"tensor": tid}] if faulty else [{"tensor": tid}, 20000]}
        try:
            s.call("launch", params)
            bump("fault_launch_ok" if faulty else "ok")
        except kiln.KilnError as e:
            bump(("fault_launch_" if faulty else "launch_") + e.name)
            if e.code in (E_DEVICE_FAULT, E_NOT_FOUND):
                tid = None  # the tenant's worker died: its tensors went with it
    s.close()


def run_tenant(which, url, token, seconds, start_at, queue):
    """One client process: CONNS_PER_TENANT threads until start_at + seconds."""
    while time.time() < start_at:
        time.sleep(0.005)
    deadline = time.monotonic() + seconds
    outs, threads = [], []
    for k in range(CONNS_PER_TENANT):
        out = {"lat": [], "errors": [], "items": [], "counts": {}}
        outs.append(out)
        fn, extra = {1: (tenant1_conn, ()), 2: (tenant2_conn, (secrets.token_hex(4) + str(k),)),
                     3: (tenant3_conn, (start_at + k,)), 4: (tenant4_conn, (k,))}[which]

        def body(fn=fn, out=out, extra=extra):
            try:
                fn(url, token, deadline, out, *extra)
            except Exception as e:  # a client that breaks is a result, not a crash of the bench
                out["errors"].append("client exception: %r" % (e,))
        t = threading.Thread(target=body)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    merged = {"lat": [], "errors": [], "items": 0, "counts": {}}
    for o in outs:
        merged["lat"] += o["lat"]
        merged["errors"] += o["errors"]
        merged["items"] += sum(o["items"])
        for k, v in o["counts"].items():
            merged["counts"][k] = merged["counts"].get(k, 0) + v
    t = os.times()
    merged["cpu_s"] = t.user + t.system
    queue.put((which, merged))


def run_phase(tenants, url, tokens, seconds):
    q = mp.Queue()
    start_at = time.time() + 2.0  # every process connects after this, together
    procs = [mp.Process(target=run_tenant, args=(w, url, tokens[w], seconds, start_at, q)) for w in tenants]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        w, r = q.get(timeout=seconds + 300)
        results[w] = r
    for p in procs:
        p.join()
    return results


# --- kilnd observation -----------------------------------------------------------------------

def held(st):
    """KiB kilnd accounts to its artifact caches: the module table and the memory cache."""
    return (st["compile"].get("module_bytes", 0) + st["cache"]["bytes_memory"]) // 1024


def proc_usage(pid):
    fds = len(os.listdir("/proc/%d/fd" % pid))
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, fds


def cpu_seconds(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick
    except OSError:
        return 0.0, 0.0


def children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return "?"


def settle(s, conns=1, timeout=60):
    """Waits until kilnd has only the probe connection and nothing running."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = s.stats()
        busy = st["compile"]["workers_busy"] + sum(d["launches"] for d in st["devices"])
        if st["connections"] == conns and busy == 0:
            return st
        time.sleep(0.05)
    return s.stats()


def scrape(url):
    if not url:
        return None
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    sums = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        if name in ("kiln_worker_restarts_total", "kiln_device_faults_total"):
            key = (name, name_labels)
            sums[key] = float(value)
    return sums


class Monitor(threading.Thread):
    """Samples stats once a second during the chaos phase: compile queue and busy workers."""

    def __init__(self, url, token):
        super().__init__(daemon=True)
        self.s = kiln.connect(url, token=token)
        self.stop = threading.Event()
        self.samples = []

    def run(self):
        while not self.stop.wait(1.0):
            st = self.s.stats()
            c = st["compile"]
            self.samples.append((c["workers_busy"], c["queued_interactive"] + c["queued_batch"],
                                 os.getloadavg()[0]))


# --- main ------------------------------------------------------------------------------------

def summary(r):
    lat = [x for _, x in r["lat"]]
    return len(r["lat"]), len(r["errors"]), pct(lat, 0.5) * 1e3, pct(lat, 0.99) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kilnd", default=os.path.join(ROOT, "build", "server", "kilnd"))
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--alone", type=float, default=20)
    ap.add_argument("--idle", type=float, default=35, help="idle wait before the last RSS/fd reading "
                    "(the shared-memory pool gives back buffers unused for 30 s)")
    ap.add_argument("--compile-nice", type=int, default=0,
                    help="renice kilnd's compile workers by this much once they run (an experiment "
                    "on where tenant 1's latency goes; kilnd has no such option)")
    ap.add_argument("--compile-workers", type=int, default=0, help="kilnd --compile-workers (0: its default)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "chaos.md"))
    a = ap.parse_args()

    load_before = os.getloadavg()
    tmp = tempfile.mkdtemp(prefix="kiln-chaos-")
    tokens = {w: "chaos-%d-%s" % (w, secrets.token_hex(16)) for w in (1, 2, 3, 4)}
    tok_path = os.path.join(tmp, "tokens")
    with open(tok_path, "w") as f:
        for w, t in tokens.items():
            # tenant 1's connection also reads `stats` for the whole daemon
            f.write("%s tenant%d%s\n" % (t, w, " stats=all" if w == 1 else ""))
    d = kiln.start_daemon(a.kilnd, tmpdir=tmp, listen=["tcp:127.0.0.1:0"], log_level="warn",
                          # All 64 clients share 127.0.0.1, like a team behind one NAT: they
                          # connect at once, so more than the default 8 may be before `hello`.
                          args=["--tokens", tok_path, "--metrics", "tcp:127.0.0.1:0",
                                "--max-anonymous-per-peer", "64"] +
                          (["--compile-workers", str(a.compile_workers)] if a.compile_workers else []))
    url = d.urls[0]
    metrics_url = next((u for u in d.urls if u.startswith("http://")), None)
    t_start = time.time()
    probe = kiln.connect(url, token=tokens[1])
    if a.compile_nice:
        for p in children(d.pid):
            if comm(p).startswith("kiln-compile"):
                os.setpriority(os.PRIO_PROCESS, p, a.compile_nice)
    print("kilnd pid %d at %s, metrics %s" % (d.pid, url, metrics_url), flush=True)

    alone = run_phase([1], url, tokens, a.alone)[1]
    st0 = settle(probe)
    rss0, fds0 = proc_usage(d.pid)
    kids0 = sorted(children(d.pid))
    restarts0 = sum(w["restarts"] for w in st0["workers"])
    cpu0 = {p: sum(cpu_seconds(p)) for p in [d.pid] + kids0}
    own0, reaped0 = cpu_seconds(d.pid)
    print("tenant 1 alone: %d requests, %d errors, p50 %.2f ms, p99 %.2f ms" % summary(alone), flush=True)

    mon = Monitor(url, tokens[1])
    mon.start()
    t_chaos = time.monotonic()
    chaos = run_phase([1, 2, 3, 4], url, tokens, a.seconds)
    chaos_wall = time.monotonic() - t_chaos
    mon.stop.set()
    mon.join()
    mon.s.close()
    own1, reaped1 = cpu_seconds(d.pid)
    kids1 = sorted(children(d.pid))
    cpu_by_comm = {}
    for p in kids1:
        cpu_by_comm.setdefault(comm(p), 0.0)
        cpu_by_comm[comm(p)] += sum(cpu_seconds(p)) - cpu0.get(p, 0.0)
    st1 = settle(probe)
    rss1, fds1 = proc_usage(d.pid)
    time.sleep(a.idle)
    st2 = settle(probe)
    rss2, fds2 = proc_usage(d.pid)
    kids2 = children(d.pid)
    metrics = scrape(metrics_url)
    alive = d.alive()
    probe.close()
    status = d.stop()

    # --- checks -----------------------------------------------------------------------------
    r1, r2, r3, r4 = chaos[1], chaos[2], chaos[3], chaos[4]
    n_alone, e_alone, p50_alone, p99_alone = summary(alone)
    n1, e1, p50_1, p99_1 = summary(r1)
    n2, e2, p50_2, p99_2 = summary(r2)
    restarts_stats = sum(w["restarts"] for w in st2["workers"]) - restarts0
    by_tenant = {}
    for w in st2["workers"]:
        by_tenant[w["tenant"]] = by_tenant.get(w["tenant"], 0) + w["restarts"]
    crashes = st2["compile"]["crashes"]
    m_restarts = m_faults = None
    if metrics is not None:
        m_restarts = sum(v for (n, _), v in metrics.items() if n == "kiln_worker_restarts_total")
        m_faults = sum(v for (n, _), v in metrics.items() if n == "kiln_device_faults_total")
    c4 = r4["counts"]
    fault_launches = sum(v for k, v in c4.items() if k.startswith("fault_launch_"))
    checks = [
        ("tenant 1 sees zero errors", e1 == 0 and e_alone == 0, "%d errors" % e1),
        ("tenant 2 sees zero errors", e2 == 0, "%d errors" % e2),
        ("tenant 1 p99 under chaos within 5x of alone", p99_1 <= 5 * p99_alone,
         "%.2f ms vs %.2f ms alone (%.1fx)" % (p99_1, p99_alone, p99_1 / p99_alone)),
        ("kilnd RSS ends where it started (within 10%% or 8 MiB)",
         rss2 <= max(rss0 * 1.10, rss0 + 8192), "%d -> %d KiB (%d right after)" % (rss0, rss2, rss1)),
        # The artifact caches keep every fresh build by design (bounded): what kilnd holds
        # beyond what they account for must come back. module_bytes counts the modules' kernel
        # tables; the memory cache the encoded artifacts (the module table refers to them).
        ("kilnd RSS beyond its accounted artifact caches ends where it started (within 10%% or 16 MiB)",
         rss2 - held(st2) <= max((rss0 - held(st0)) * 1.10, rss0 - held(st0) + 16384),
         "%d -> %d KiB (caches: %d -> %d KiB)" % (rss0 - held(st0), rss2 - held(st2), held(st0), held(st2))),
        ("kilnd fd count ends where it started (one channel fd per worker process started since)",
         fds2 - fds0 <= max(0, len(kids2) - len(kids0)),
         "%d -> %d (%d right after); worker processes %d -> %d" % (fds0, fds2, fds1, len(kids0), len(kids2))),
        ("worker deaths: stats restarts = metrics device faults + compile restarts",
         metrics is not None and m_restarts == restarts_stats + crashes and m_faults == restarts_stats,
         "stats: %d device worker restarts %s, %d compile crashes; metrics: restarts %s, device faults %s"
         % (restarts_stats, by_tenant, crashes, m_restarts, m_faults)),
        ("kilnd alive after the chaos and exits 0 on SIGTERM", alive and status == 0, "status %s" % status),
    ]
    for name, ok, detail in checks:
        print("%s %s: %s" % ("PASS" if ok else "FAIL", name, detail))

    # --- report -----------------------------------------------------------------------------
    cpu_model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    busy = [b for b, _, _ in mon.samples]
    queued = [q for _, q, _ in mon.samples]
    loads = [l for _, _, l in mon.samples]

    def per_kind(r):
        kinds = {}
        for k, x in r["lat"]:
            kinds.setdefault(k, []).append(x)
        return ", ".join("%s %d (p50 %.2f / p99 %.2f ms)" % (k, len(v), pct(v, .5) * 1e3, pct(v, .99) * 1e3)
                         for k, v in sorted(kinds.items()))

    t3 = r3["counts"]
    t3_sent = sum(v for k, v in t3.items() if k.startswith("sent_"))
    lines = [
        "# Load and chaos test (bench/chaos.py)",
        "",
        "Issue 5 load test: %d connections over 4 tenants, loopback TCP, %d s of chaos after %d s of "
        "tenant 1 alone. One client process per tenant (fork), one thread and connection per "
        "connection, the kiln Python client (tenant 3: raw sockets)." % (4 * CONNS_PER_TENANT, a.seconds, a.alone),
        "",
        "## %s" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
        "",
        "- Machine: %s, %d cores; Linux %s; Python %s, msgpack %s." % (
            cpu_model, os.cpu_count(), platform.release(), platform.python_version(),
            ".".join(map(str, msgpack.version))),
        "- kilnd: `%s`, commit %s%s; default options plus `--tokens` (4 tenants, no quotas), `--max-anonymous-per-peer 64` and "
        "`--metrics`; compile workers: %d%s." % (os.path.relpath(a.kilnd, ROOT), rev,
                                                " (working tree with uncommitted changes)" if dirty else "",
                                                st2["compile"]["workers"],
                                                ", reniced to nice %d by the bench (--compile-nice)" % a.compile_nice
                                                if a.compile_nice else ""),
        "- Wall time of the whole run: %.0f s. Load average (1/5/15 min) before the run: %.2f %.2f %.2f "
        "(other work on the machine); during the chaos (1 min, this bench included): mean %.2f, max %.2f." % (
            (time.time() - t_start,) + load_before + (sum(loads) / max(1, len(loads)), max(loads or [0]))),
        "",
        "### Checks",
        "",
        "| check | result | numbers |",
        "|---|---|---|",
    ] + ["| %s | %s | %s |" % (n, "**pass**" if ok else "**FAIL**", det) for n, ok, det in checks] + [
        "",
        "### Per tenant (chaos phase)",
        "",
        "| tenant | what | requests | errors | p50 | p99 |",
        "|---|---|---|---|---|---|",
        "| 1 alone | ping + upload/download 64 KiB, depth %d | %d | %d | %.2f ms | %.2f ms |" % (
            DEPTH, n_alone, e_alone, p50_alone, p99_alone),
        "| 1 | the same, under chaos | %d | %d | %.2f ms | %.2f ms |" % (n1, e1, p50_1, p99_1),
        "| 2 | compile_batch of 8 fresh kernels | %d batches (%d items) | %d | %.0f ms | %.0f ms |" % (
            n2, r2["items"], e2, p50_2, p99_2),
        "| 3 | malformed traffic | %d sent | (all errors by design) | | |" % t3_sent,
        "| 4 | launches, every 10th faults | %d | %d not ok | | |" % (
            sum(c4.values()), sum(v for k, v in c4.items() if k != "ok" and k != "fault_launch_ok")),
        "",
        "- Tenant 1 by request (alone): %s." % per_kind(alone),
        "- Tenant 1 by request (chaos): %s." % per_kind(r1),
        "- Tenant 3 outcomes: %s." % ", ".join("%s %d" % kv for kv in sorted(t3.items())),
        "- Tenant 4 outcomes: %s (%d faulting launches sent)." % (
            ", ".join("%s %d" % kv for kv in sorted(c4.items())), fault_launches),
        "- First client error of tenants 1 and 2: %s." % ("; ".join(
            "tenant %d: %s" % (w, chaos[w]["errors"][0][:160]) for w in (1, 2) if chaos[w]["errors"]) or "none"),
        "",
        "### kilnd",
        "",
        "| | RSS | fds |",
        "|---|---|---|",
        "| before the chaos (after tenant 1 alone) | %d KiB | %d |" % (rss0, fds0),
        "| right after the chaos (clients gone) | %d KiB | %d |" % (rss1, fds1),
        "| after %d s idle | %d KiB | %d |" % (a.idle, rss2, fds2),
        "",
        "- kilnd's artifact caches (they grow with every fresh build, up to their bounds): memory cache "
        "%d -> %d KiB, modules known to tenants %d -> %d." % (
            st0["cache"]["bytes_memory"] // 1024, st2["cache"]["bytes_memory"] // 1024,
            sum(t["modules"] for t in st0["tenants"]), sum(t["modules"] for t in st2["tenants"])),
        "- Worker deaths: `stats` device worker restarts %d (by tenant %s), compile crashes %d; metrics "
        "`kiln_worker_restarts_total` %s, `kiln_device_faults_total` %s." % (
            restarts_stats, by_tenant, crashes, m_restarts, m_faults),
        "",
        "### Where the time goes (chaos phase, %.0f s wall, %d cores = %.0f core-seconds)" % (
            chaos_wall, os.cpu_count(), chaos_wall * os.cpu_count()),
        "",
        "- CPU seconds: kilnd %.1f; its live workers %s; workers that died and were reaped %.1f; "
        "client processes %s." % (
            own1 - own0, ", ".join("%s %.1f" % kv for kv in sorted(cpu_by_comm.items())), reaped1 - reaped0,
            ", ".join("tenant %d %.1f" % (w, chaos[w]["cpu_s"]) for w in (1, 2, 3, 4))),
        "- Compile workers busy (1 s samples): mean %.2f of %d; compile queue mean %.0f, max %d." % (
            sum(busy) / max(1, len(busy)), st2["compile"]["workers"], sum(queued) / max(1, len(queued)),
            max(queued or [0])),
    ]
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", a.out)
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
