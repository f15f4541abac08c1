#!/usr/bin/env python3
"""Whether this machine enforces CPU affinity (gVisor may accept sched_setaffinity and still
run a task on any core): a busy loop timed alone on core 0, then two of them at once, both
pinned to core 0, then one on core 0 and one on core 1. Enforced: the pair on one core takes
about twice as long as one alone; the pair on two cores about as long."""

import multiprocessing as mp
import os
import time


def spin(core, n, q):
    os.sched_setaffinity(0, {core})
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i
    q.put(time.perf_counter() - t0)


def run(cores, n):
    q = mp.Queue()
    ps = [mp.Process(target=spin, args=(c, n, q)) for c in cores]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    return max(q.get() for _ in ps)


if __name__ == "__main__":
    n = 20_000_000
    one = run([0], n)
    same = run([0, 0], n)
    apart = run([0, 1], n)
    verdict = ("inconclusive (the pair on two cores was slowed too: other load)" if apart / one > 1.3 else
               "enforced" if same / apart > 1.6 else "NOT enforced")
    print("busy loop: alone on core 0 %.2f s; two pinned to core 0 %.2f s (%.2fx); on cores 0 and 1 "
          "%.2f s (%.2fx): affinity %s" % (one, same, same / one, apart, apart / one, verdict))
