#!/usr/bin/python3
"""A tuning run fanned out over a fleet (issue 17 "Performance"), on this machine's loopback.

    /usr/bin/python3 bench/fleet_tune_bench.py [--hosts 3] [--n 256] [--trials 32] [--out FILE]

Tunes an n x n x n float32 matmul on cpu:0 with kiln.autotune's random tuner for --trials
trials, twice, with fresh records and empty caches: on one kilnd alone (KILND, else
build/server/kilnd; --compile-workers 1, no Redis), then on kiln.fleet.runners(REDIS, "cpu")
over --hosts kilnds (each --compile-workers 1) sharing a redis-server on a free TCP port of
127.0.0.1 as their artifact tier (--cache-remote) and registry (--fleet, --advertise): every
host's cpu:0, each round's batch split between them. Reports trials per second of each.
Every number in the report comes from this run.
"""

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import kiln  # noqa: E402
from kiln import autotune as at  # noqa: E402
from fleet_helpers import Redis, free_port  # noqa: E402


def tune(runners, dev, n, trials, records):
    task = at.Task("matmul", (n, n, n), "float32", dev)
    t0 = time.monotonic()
    r = at.tune(task, runners, trials=trials, tuner="random", records=records, progress=None)
    return len(r.trials), time.monotonic() - t0, r.best and r.best["result"]["gflops"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    exe = os.environ.get("KILND") or os.path.join(ROOT, "build", "server", "kilnd")
    load0 = os.getloadavg()[0]
    tmp = tempfile.mkdtemp(prefix="kiln-fleet-tune-")
    r = Redis(os.path.join(tmp, "redis"), tcp=True)
    secret = os.path.join(tmp, "secret")
    with open(secret, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(secret, 0o600)
    ds = []
    try:
        # one kilnd alone, of its own (no Redis): its cache starts empty like the fleet's
        alone = kiln.start_daemon(exe, args=("--compile-workers", "1"))
        try:
            one = kiln.connect(alone.url)
            single = tune(one, one.cpu(0), args.n, args.trials, os.path.join(tmp, "one.jsonl"))
            one.close()
        finally:
            alone.stop()
        for _ in range(args.hosts):
            port = free_port()
            ds.append(kiln.start_daemon(exe, listen=["tcp:127.0.0.1:%d" % port], args=(
                "--compile-workers", "1", "--cache-remote", r.url, "--fleet-secret-file", secret,
                "--fleet", r.url, "--advertise", "tcp:127.0.0.1:%d" % port, "--fleet-ttl", "5")))
        deadline = time.monotonic() + 20
        while len(kiln.fleet.hosts(r.url)) < args.hosts and time.monotonic() < deadline:
            time.sleep(0.05)
        runners = kiln.fleet.runners(r.url, "cpu")
        assert len(runners) == args.hosts, runners
        fleet = tune(runners, runners[0][1], args.n, args.trials, os.path.join(tmp, "fleet.jsonl"))
        remote = [s.stats()["cache_remote"] for s, _ in runners]
    finally:
        for d in ds:
            d.stop()
        r.kill()
    lines = ["## Tuning fanned out over a fleet (bench/fleet_tune_bench.py)", "",
             "Run %s on %s (%s, %d cores; load average %.1f at the start, %.1f at the end): "
             "matmul %d^3 float32 on cpu:0, the random tuner, %d trials, kilnds with one compile "
             "worker each sharing one Redis on TCP loopback." % (
                 datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), platform.node(),
                 platform.machine(), os.cpu_count(), load0, os.getloadavg()[0], args.n, args.trials), "",
             "| runners | trials | wall s | trials/s | best GFLOP/s |", "|---|---:|---:|---:|---:|"]
    for name, (k, wall, best) in (("one kilnd", single), ("%d kilnds (kiln.fleet.runners)" % args.hosts, fleet)):
        lines.append("| %s | %d | %.1f | %.2f | %s |" % (name, k, wall, k / wall, "%.1f" % best if best else "-"))
    lines += ["", "Remote tier during the fleet run, per host (hits / puts): " +
              ", ".join("%d / %d" % (x["hits"], x["puts"]) for x in remote)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
