#!/usr/bin/python3
"""The fleet's remote artifact tier (issue 17 "Performance"), on this machine's loopback.

    /usr/bin/python3 bench/fleet_bench.py [--runs N] [--big-runs N] [--rodata-runs N] [--out FILE]
    chrt -f 10 /usr/bin/python3 bench/fleet_bench.py ...   # as bench/results/fleet.md was run

(--out writes the generated tables alone: bench/results/fleet.md keeps its history by hand.)

(Under `chrt -f 10` the bench and everything it starts run SCHED_FIFO, ahead of the other
work of a shared machine; the results file says which runs used it.)

Starts a redis-server on a free TCP port of 127.0.0.1 and three kilnds (KILND, else
build/server/kilnd) with --compile-workers 1: A and B share the Redis (--cache-remote),
C has none. For each of --runs fresh payloads (vadd with a salt comment), A compiles it (a
local compile, then a put); then B compiles it (a remote hit: memory and disk miss, Redis
GETRANGE, MAC check, decode, local put) and B compiles it again (a memory hit); C compiles
it (a local compile, for comparison). The same for a large kernel: a constant table of
--big-kib KiB in its IR makes an artifact of about 1 MiB (IR, assembly, code object), and a
request of about as much, which every round trip carries, memory hits too: the remote tier's
own cost is the remote hit less the memory hit of the same payload, or inside kilnd B the steps
of its debug log (`event=cache_remote_hit`). And the same size of artifact from a small request
(--rodata-kib, default 1024: vadd reading a zeroinitializer constant table, emitted into the
code object's .rodata; about 1.4 KB of IR), whose round trip is the tier's rather than the
request's. The floor: the same Redis's large entries read by redis-py (GETRANGE and GET). Times are client round trips through kiln.Session.compile on a
unix socket. Every number in the report comes from this run.
"""

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import kiln  # noqa: E402
from fleet_helpers import Redis, rodata_ir, table_ir as big_ir  # noqa: E402

VADD = open(os.path.join(ROOT, "clients", "python", "examples", "vadd.ll")).read()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def timed(sess, src):
    t0 = time.perf_counter()
    m = sess.compile(src, target="cpu")
    return (time.perf_counter() - t0) * 1e3, m


def wait_puts(sess, n):
    deadline = time.monotonic() + 60
    while sess.stats()["cache_remote"]["puts"] < n and time.monotonic() < deadline:
        time.sleep(0.01)


def series(sa, sb, sc, sources):
    out = {"a_compile": [], "b_remote": [], "b_memory": [], "c_compile": []}
    puts0 = sa.stats()["cache_remote"]["puts"]
    read0 = sb.stats()["cache_remote"]["bytes_read"]
    for i, src in enumerate(sources):
        ms, ma = timed(sa, src)
        assert not ma.cached
        out["a_compile"].append(ms)
        wait_puts(sa, puts0 + i + 1)
        ms, mb = timed(sb, src)
        assert mb.cached and mb.id == ma.id, "not a remote hit"
        out["b_remote"].append(ms)
        ms, mb = timed(sb, src)
        out["b_memory"].append(ms)
        ms, mc = timed(sc, src)
        assert not mc.cached
        out["c_compile"].append(ms)
    st = sb.stats()
    assert st["compile"]["compiles"] == 0
    out["bytes"] = (st["cache_remote"]["bytes_read"] - read0) / len(sources)
    return out


def _hiredis():
    try:
        import hiredis  # noqa: F401
        return True
    except ImportError:
        return False


def redis_floor(r):
    """The floor: the same Redis's 1 MiB entries read by a plain client (redis-py over TCP,
    hiredis's parser when python3-hiredis is installed), GETRANGE as kilnd sends it and GET,
    each entry read as many times as kilnd B read it once; ms per read."""
    import redis
    c = redis.Redis(host="127.0.0.1", port=r.port)
    keys = [k for k in c.scan_iter("kiln:art:*", count=1000) if c.strlen(k) > 512 * 1024]
    out = {"getrange": [], "get": []}
    for k in keys:
        for cmd, f in (("getrange", lambda: c.getrange(k, 0, 64 << 20)), ("get", lambda: c.get(k))):
            t0 = time.perf_counter()
            v = f()
            out[cmd].append((time.perf_counter() - t0) * 1e3)
            assert len(v) > 512 * 1024
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--big-runs", type=int, default=15)
    ap.add_argument("--big-kib", type=int, default=210)  # an artifact of about 1 MiB
    ap.add_argument("--rodata-runs", type=int, default=30)
    ap.add_argument("--rodata-kib", type=int, default=1024)  # a power of two: the kernel masks its index
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    exe = os.environ.get("KILND") or os.path.join(ROOT, "build", "server", "kilnd")
    load0 = os.getloadavg()[0]
    tmp = tempfile.mkdtemp(prefix="kiln-fleet-bench-")
    r = Redis(os.path.join(tmp, "redis"), tcp=True)
    secret = os.path.join(tmp, "secret")
    with open(secret, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(secret, 0o600)
    common = ("--compile-workers", "1")
    remote = ("--cache-remote", r.url, "--fleet-secret-file", secret)
    ds = [kiln.start_daemon(exe, args=remote + common),
          kiln.start_daemon(exe, args=remote + common, log_level="debug"),  # B logs each hit's split
          kiln.start_daemon(exe, args=common)]
    try:
        sa, sb, sc = (kiln.connect(d.url) for d in ds)
        for s in (sa, sb):
            while not s.stats()["cache_remote"]["up"]:
                time.sleep(0.01)
        salt = os.urandom(4).hex()
        small = series(sa, sb, sc, [VADD + "\n; bench %s %d\n" % (salt, i) for i in range(args.runs)])
        big = series(sa, sb, sc, [big_ir(args.big_kib, i + 1000 * len(salt)) + "\n; %s %d\n" % (salt, i)
                                  for i in range(args.big_runs)])
        rodata = series(sa, sb, sc, [rodata_ir(args.rodata_kib, i + 1000 * len(salt)) + "\n; %s %d\n" % (salt, i)
                                     for i in range(args.rodata_runs)])
        floor = redis_floor(r)
        b_remote = sb.stats()["cache_remote"]
    finally:
        for d in ds:
            d.stop()
        r.kill()
    # kilnd B's own split of each remote hit: Redis round trip + reply, then the MAC
    split = {}
    hit = 0
    for line in ds[1].log().splitlines():
        if "event=cache_remote_hit" in line:
            f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            # B's hits come in the order of the series: small, big, rodata
            big_hit = 0 if hit < args.runs else 1 if hit < args.runs + args.big_runs else 2
            hit += 1
            split.setdefault(big_hit, []).append((float(f["redis_ms"]), float(f["mac_ms"]), float(f["handoff_ms"]),
                                                      float(f["cpu_ms"]), float(f.get("first_ms", "nan")),
                                                      int(f.get("mac_streamed", "0"))))
    lines = ["# The fleet's remote artifact tier (bench/fleet_bench.py)", "",
             "Run %s on %s (%s, %d cores; load average %.1f at the start, %.1f at the end), Redis on TCP loopback, "
             "three kilnds with one compile worker each; client round trips of `compile` (target "
             "cpu) over a unix socket, in ms." % (datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
                                                  platform.node(), platform.machine(), os.cpu_count(),
                                                  load0, os.getloadavg()[0]), "",
             "| artifact | runs | A: local compile p50 | B: remote hit p50 / p90 / p99 | B: memory hit p50 | "
             "remote hit less memory hit, p50 of the per-run differences | "
             "C (no Redis): local compile p50 |", "|---|---:|---:|---:|---:|---:|---:|"]
    rows = (("vadd, %.1f KiB" % (small["bytes"] / 1024), small),
            ("vadd + table, %.0f KiB (request about as large)" % (big["bytes"] / 1024), big),
            ("vadd + .rodata, %.0f KiB (request %.1f KB)" % (rodata["bytes"] / 1024,
                                                              len(rodata_ir(args.rodata_kib, 0)) / 1e3), rodata))
    for name, s in rows:
        diff = [x - y for x, y in zip(s["b_remote"], s["b_memory"])]
        lines.append("| %s | %d | %.2f | %.2f / %.2f / %.2f | %.2f | %.2f | %.2f |" % (
            name, len(s["b_remote"]), pct(s["a_compile"], 50), pct(s["b_remote"], 50), pct(s["b_remote"], 90),
            pct(s["b_remote"], 99),
            pct(s["b_memory"], 50), pct(diff, 50), pct(s["c_compile"], 50)))
    lines += ["", "The floor, in the same run: the same Redis's %d entries of about 1 MiB read by redis-py over "
              "TCP loopback (%s parser), ms per read, p50 / p99: GETRANGE 0 N (as kilnd reads) %.3f / %.3f, "
              "GET %.3f / %.3f." % (len(floor["get"]), "hiredis" if _hiredis() else "pure-Python",
                                    pct(floor["getrange"], 50), pct(floor["getrange"], 99), pct(floor["get"], 50),
                                    pct(floor["get"], 99))]
    if "spare_used" in b_remote:
        lines += ["", "kilnd B's large replies read into its prefaulted spare receive buffer: %d; without it (none "
                  "ready, or the wrong size): %d." % (b_remote["spare_used"], b_remote["spare_missed"])]
    lines += ["", "Inside kilnd B (its debug log, `event=cache_remote_hit`), p50 / p99 in ms:", "",
              "| artifact | GETRANGE sent to its first reply bytes | Redis: GETRANGE sent to reply parsed "
              "(the streamed MAC inside) | MAC left after the reply | hand-off: decode, answer, "
              "local cache put | sum of the three, per hit | the loop thread's CPU time, GETRANGE sent "
              "to answer | hits whose MAC streamed |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for big_hit, name in ((0, "vadd"), (1, "vadd + table"), (2, "vadd + .rodata")):
        xs = split.get(big_hit, [])
        if xs:
            cols = ([[x[4] for x in xs]] + [[x[i] for x in xs] for i in range(3)] + [[sum(x[:3]) for x in xs],
                                                                                      [x[3] for x in xs]])
            lines.append("| %s | %s | %d of %d |" % (name, " | ".join("%.3f / %.3f" % (pct(c, 50), pct(c, 99))
                                                                 for c in cols),
                                                     sum(1 for x in xs if x[5] > 0), len(xs)))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
