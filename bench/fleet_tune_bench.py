#!/usr/bin/python3
"""A tuning run fanned out over a fleet (issue 17 "Performance"), on this machine's loopback.

    /usr/bin/python3 bench/fleet_tune_bench.py [--hosts 3] [--n 256] [--trials 32] [--out FILE]
        [--cores-per-host K [--device-cores D]] [--batch B]

Tunes an n x n x n float32 matmul on cpu:0 with kiln.autotune's random tuner for --trials
trials, twice, with fresh records and empty caches: on one kilnd alone (KILND, else
build/server/kilnd; --compile-workers 1, no Redis), then on kiln.fleet.runners(REDIS, "cpu")
over --hosts kilnds (each --compile-workers 1) sharing a redis-server on a free TCP port of
127.0.0.1 as their artifact tier (--cache-remote) and registry (--fleet, --advertise): every
host's cpu:0, each round's batch split between them. Reports trials per second of each.
Every number in the report comes from this run.

By default the kilnds share the machine's cores (on a 2-core box that cannot show a speed-up).
With --cores-per-host K each kilnd gets its own cores: host i runs on [i*K, (i+1)*K) (its whole
process, started under that affinity), cpu:0 pinned to the first D of them (--device-cores,
default max(1, K // 4)) and the compile workers to the rest (--pin compile=, one worker per
core; with K = 1 both get the one core). The kilnd alone gets the same K cores as host 0, so the
two runs differ only in the number of hosts; the client and Redis run on the cores after the
last host's (all of them if none are left). Needs hosts * K cores.
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


def tune(runners, dev, n, trials, records, batch=None):
    task = at.Task("matmul", (n, n, n), "float32", dev)
    t0 = time.monotonic()
    r = at.tune(task, runners, trials=trials, tuner="random", records=records, progress=None, batch=batch)
    return len(r.trials), time.monotonic() - t0, r.best and r.best["result"]["gflops"]


def host_cores(i, k, d):
    """(whole set, cpu:0's, the compile workers') of host i with k cores each, d of them cpu:0's."""
    cores = list(range(i * k, (i + 1) * k))
    return cores, cores[:d], (cores[d:] or cores)


def cpus(cores):
    return ",".join(str(c) for c in cores)


def start(exe, i, args, listen=None, extra=()):
    """kilnd number i: --compile-workers 1 on the shared cores (the default), else under its own
    cores' affinity (inherited from this process around the start), cpu:0 and compile pinned."""
    if not args.cores_per_host:
        return kiln.start_daemon(exe, listen=listen, args=("--compile-workers", "1") + tuple(extra))
    allc, dev, comp = host_cores(i, args.cores_per_host, args.device_cores)
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, allc)
    try:
        return kiln.start_daemon(exe, listen=listen, args=(
            "--pin", "cpu:0=" + cpus(dev), "--pin", "compile=" + cpus(comp),
            "--compile-workers", str(len(comp))) + tuple(extra))
    finally:
        os.sched_setaffinity(0, mine)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--out", default=None)
    ap.add_argument("--cores-per-host", type=int, default=0,
                    help="each kilnd on its own K cores (default: all share the machine's)")
    ap.add_argument("--device-cores", type=int, default=0,
                    help="of those, cpu:0's (default max(1, K // 4)); the rest compile")
    ap.add_argument("--batch", type=int, default=None, help="kiln.autotune's batch (default its own)")
    args = ap.parse_args()
    k = args.cores_per_host
    if k:
        args.device_cores = args.device_cores or max(1, k // 4)
        if args.device_cores > k:
            ap.error("--device-cores is more than --cores-per-host")
        avail = sorted(os.sched_getaffinity(0))
        if avail[:args.hosts * k] != list(range(args.hosts * k)):
            ap.error("--hosts %d --cores-per-host %d needs cores 0-%d; this process may run on %s"
                     % (args.hosts, k, args.hosts * k - 1, cpus(avail)))
        rest = avail[args.hosts * k:]
        if rest:  # the client, and Redis started from it, off the kilnds' cores
            os.sched_setaffinity(0, rest)
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
        alone = start(exe, 0, args)
        try:
            one = kiln.connect(alone.url)
            pipelined = [not at.shares_compile_cores(one.cpu(0))]
            single = tune(one, one.cpu(0), args.n, args.trials, os.path.join(tmp, "one.jsonl"), args.batch)
            one.close()
        finally:
            alone.stop()
        for i in range(args.hosts):
            port = free_port()
            ds.append(start(exe, i, args, listen=["tcp:127.0.0.1:%d" % port], extra=(
                "--cache-remote", r.url, "--fleet-secret-file", secret,
                "--fleet", r.url, "--advertise", "tcp:127.0.0.1:%d" % port, "--fleet-ttl", "5")))
        deadline = time.monotonic() + 20
        while len(kiln.fleet.hosts(r.url)) < args.hosts and time.monotonic() < deadline:
            time.sleep(0.05)
        runners = kiln.fleet.runners(r.url, "cpu")
        assert len(runners) == args.hosts, runners
        pipelined.append(not any(at.shares_compile_cores(dv) for _, dv in runners))
        fleet = tune(runners, runners[0][1], args.n, args.trials, os.path.join(tmp, "fleet.jsonl"), args.batch)
        remote = [s.stats()["cache_remote"] for s, _ in runners]
    finally:
        for d in ds:
            d.stop()
        r.kill()
    if k:
        how = ("each kilnd on its own %d cores (host i on cores [%d*i, %d*(i+1)): cpu:0 pinned to the "
               "first %d, %d compile workers pinned to the rest; the kilnd alone on host 0's), the client "
               "and Redis on %s" % (k, k, k, args.device_cores, max(1, k - args.device_cores),
                                     "cores " + cpus(rest) if rest else "all cores"))
    else:
        how = "kilnds with one compile worker each, all on the machine's shared cores"
    lines = ["## Tuning fanned out over a fleet (bench/fleet_tune_bench.py)", "",
             "Run %s on %s (%s, %d cores; load average %.1f at the start, %.1f at the end): "
             "matmul %d^3 float32 on cpu:0, the random tuner, %d trials, batch %s, %s, sharing one "
             "Redis on TCP loopback; kiln.autotune pipelined: alone %s, fleet %s." % (
                 datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), platform.node(),
                 platform.machine(), os.cpu_count(), load0, os.getloadavg()[0], args.n, args.trials,
                 args.batch or "kiln.autotune's default (max(8, 2 x runners))", how,
                 *("yes" if p else "no" for p in pipelined)), "",
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
