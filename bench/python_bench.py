#!/usr/bin/python3
"""Python client benchmark (issue 4): round trips and transfer rates through kiln.

    /usr/bin/python3 bench/python_bench.py [--url URL] [--out bench/results/python.md]

Without --url (or KILN_URL) it starts a private kilnd (KILND, else build/server/kilnd).
Measures, on one connection, sequentially:
  - ping round trip p50/p99;
  - round trip of a cached `launch` (vector add of 64 floats on cpu:0) p50/p99 (target <= 150 us);
  - kiln.nd.array and .numpy() of a 256 MiB float32 array, GB/s each way (target >= 1 GB/s).
Methods the daemon lacks are reported as such, never timed.
"""

import argparse
import datetime
import os
import platform
import resource
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import msgpack  # noqa: E402
import numpy as np  # noqa: E402

import kiln  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def round_trips(fn, n, warm=200):
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return pct(ts, 50) * 1e6, pct(ts, 99) * 1e6


def raw_client(url):
    """The cheapest possible synchronous client, for a baseline: what kiln adds is the rest."""
    import socket
    kind, _, rest = url.partition(":")
    if kind == "unix":
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(rest)
    else:
        host, _, port = rest.rpartition(":")
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    up = msgpack.Unpacker(raw=False)

    def call(method, params):
        sock.sendall(msgpack.packb([0, 1, method, [params]]))
        while True:
            try:
                return up.unpack()
            except msgpack.OutOfData:
                up.feed(sock.recv(1 << 16))
    return call


def machine():
    model = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return "%s, %d cores, Linux %s, Python %s, numpy %s, msgpack %s" % (
        model, os.cpu_count(), platform.release(), platform.python_version(), np.__version__,
        ".".join(map(str, msgpack.version)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("--out", help="append a results section to this markdown file")
    ap.add_argument("--n", type=int, default=20000, help="round trips per latency measurement")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()

    daemon = None
    url = args.url or os.environ.get("KILN_URL")
    if not url:
        daemon = kiln.start_daemon()
        url = daemon.url
    lines = []

    def say(s):
        print(s, flush=True)
        lines.append(s)

    try:
        s = kiln.connect(url)
        dev = s.cpu(0)
        say("- server: %s at %s" % (s.server, url.split(":", 1)[0]))
        raw = raw_client(url)
        p50, p99 = round_trips(s.ping, args.n)
        say("- `ping` round trip: p50 %.1f us, p99 %.1f us (%d sequential calls)" % (p50, p99, args.n))
        r50, r99 = round_trips(lambda: raw("ping", {}), args.n)
        say("  - baseline, a bare msgpack + blocking socket loop: p50 %.1f us, p99 %.1f us" % (r50, r99))

        vadd = open(os.path.join(ROOT, "clients", "python", "examples", "vadd.ll")).read()
        try:
            m = s.compile(vadd, target=dev)
            n = 64
            a = kiln.nd.array(np.ones(n, np.float32), dev)
            b = kiln.nd.array(np.ones(n, np.float32), dev)
            c = kiln.nd.empty((n,), "float32", dev)
            f = m["myadd"]
            f(a, b, c, n, grid=1, block=64)
            p50, p99 = round_trips(lambda: f(a, b, c, n, grid=1, block=64), args.n // 2)
            say("- cached `launch` round trip (vector add, 64 floats, cpu:0): p50 %.1f us, p99 %.1f us "
                "(target p50 <= 150 us)" % (p50, p99))
            params = f._params((a, b, c, n), 1, 64)
            r50, r99 = round_trips(lambda: raw("launch", params), args.n // 2)
            say("  - baseline, the same launch from a bare msgpack + blocking socket loop: p50 %.1f us, p99 %.1f us"
                % (r50, r99))
        except kiln.NoMethod as e:
            say("- cached `launch` round trip: not measured, the daemon lacks a method (%s)" % e.message)

        nbytes = args.mib << 20
        x = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
        ups, downs, cpu_up, cpu_down = [], [], [], []

        def cpu():
            r = resource.getrusage(resource.RUSAGE_SELF)
            return r.ru_utime + r.ru_stime
        for _ in range(args.reps):
            c, t = cpu(), time.perf_counter()
            arr = kiln.nd.array(x, dev)
            ups.append(time.perf_counter() - t)
            cpu_up.append(cpu() - c)
            c, t = cpu(), time.perf_counter()
            y = arr.numpy()
            downs.append(time.perf_counter() - t)
            cpu_down.append(cpu() - c)
            assert np.array_equal(x, y)
            arr.free()
            del y
        gb = nbytes / 1e9
        say("- `kiln.nd.array` of %d MiB float32: median %.2f GB/s, best %.2f GB/s (%d runs; target >= 1 GB/s)"
            % (args.mib, gb / statistics.median(ups), gb / min(ups), args.reps))
        say("- `.numpy()` of %d MiB float32: median %.2f GB/s, best %.2f GB/s (%d runs; target >= 1 GB/s)"
            % (args.mib, gb / statistics.median(downs), gb / min(downs), args.reps))
        say("- client CPU time (user+sys of this Python process) per %d MiB: `nd.array` %.3f s, `.numpy()` %.3f s "
            "(medians); the rest of the wall time is spent waiting for the daemon"
            % (args.mib, statistics.median(cpu_up), statistics.median(cpu_down)))
        s.close()
    finally:
        if daemon is not None:
            daemon.stop()

    if args.out:
        head = "\n## %s\n\nMachine: %s. Transport: %s; `bench/python_bench.py`.\n\n" % (
            datetime.date.today().isoformat(), machine(), url.split(":", 1)[0])
        new = not os.path.exists(args.out)
        with open(args.out, "a") as f:
            if new:
                f.write("# Python client benchmarks\n\nRound trips and transfer rates through the `kiln` package "
                        "(issue 4 targets: cached `launch` p50 <= 150 us; `kiln.nd.array` and `.numpy()` of "
                        "256 MiB >= 1 GB/s each way).\n")
            f.write(head + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
