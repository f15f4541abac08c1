#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_job.c to corpus/job/ (Debian's python3-msgpack).

Each seed is a kind byte (protocol/job.h's kiln_job_kind_t) and one MessagePack value: every
job kind and reply as kilnd and the workers write them (docs/worker_jobs.md), plus the
near misses a decoder must refuse (a wrong version, a field short, a wrong type)."""
import os

import msgpack

V = 1
KEY = bytes(range(32))
KINDS = ["none", "alloc", "upload", "write", "read", "free", "sync", "load", "unload",
         "cancel_page", "launch", "time", "compile", "graph_load", "graph_run", "graph_time",
         "graph_free"]
K = {name: i for i, name in enumerate(KINDS)}
args = [[1, 7], [0, 2**63], [0, 0x3F800000]]
launch = [V, 0, KEY, 0, [4, 1, 1], [64, 1, 1], 0, 5000, 3, args]
seeds = {
    "alloc": (K["alloc"], [V, 0, 7, 4096]),
    "upload": (K["upload"], [V, 1, 7, 4096, 128]),
    "write": (K["write"], [V, 1, 7, 16, 64, 0]),
    "read": (K["read"], [V, 1, 7, 0, 4096, 0]),
    "free": (K["free"], [V, 0, 7]),
    "sync": (K["sync"], [V, 0]),
    "load": (K["load"], [V, 1, KEY, 9000]),
    "unload": (K["unload"], [V, 0, KEY]),
    "cancel_page": (K["cancel_page"], [V, 1, 4096]),
    "launch": (K["launch"], launch),
    "time": (K["time"], launch + [10, 3, 0, 1, False]),
    "compile": (K["compile"], [V, 1, 1, "gfx942", 3, 256, False, 12345]),
    "reply_launch": (K["launch"], [0.000125]),
    "reply_time": (K["time"], [[1e-5, 2e-5], 1e-5, 1.5e-5, 1.5e-5, 5e-6, 0.33, 10, 2]),
    "reply_compile": (K["compile"], [19231, 12.5]),
    "graph_load": (K["graph_load"], [V, 1, 5, [512, 256, 256], ["add0 (Add add0)", "add1"],
                                     [[KEY, 0, 0, [1, 1, 1], [64, 1, 1], 0, [[3, 0], [1, 0], [0, 0x3F800000], [0, 64]]],
                                      [KEY, 0, 1, [1, 1, 1], [64, 1, 1], 0, [[1, 0], [1, 256], [0, 0], [0, 64]]]],
                                     [[0x1234567890, 0, 256]]]),
    "graph_run": (K["graph_run"], [V, 1, 5, 1024, 60000, 3, [[77, 0, 256]], [[0, 256, 256, 512, 0], [0, 0, 8, 0, 99]]]),
    "graph_time": (K["graph_time"], [V, 1, 5, 512, 0, 4, [], 10, 3, 0, 1, False]),
    "graph_free": (K["graph_free"], [V, 0, 5]),
    "graph_load_bad_node": (K["graph_load"], [V, 1, 5, [0, 0, 0], [], [[KEY, 0, 0, [1, 1, 1], [1, 1, 1], 0, []]], []]),
    "graph_load_bad_tag": (K["graph_load"], [V, 1, 5, [0, 0, 0], ["n"], [[KEY, 0, 0, [1, 1, 1], [1, 1, 1], 0, [[4, 0]]]], []]),
    "graph_run_bad_block": (K["graph_run"], [V, 1, 5, 1024, 0, 0, [], [[3, 0, 0, 0, 0]]]),
    "graph_run_bad_copy": (K["graph_run"], [V, 1, 5, 1024, 0, 0, [[1, 2]], []]),
    "bad_version": (K["alloc"], [2, 0, 7, 4096]),
    "bad_nfds": (K["upload"], [V, 0, 7, 4096, 128]),
    "short": (K["launch"], launch[:-1]),
    "zero_grid": (K["launch"], [V, 0, KEY, 0, [0, 1, 1], [1, 1, 1], 0, 0, 0, []]),
    "bad_key": (K["load"], [V, 1, KEY[:31], 10]),
    "bad_tag": (K["launch"], [V, 0, KEY, 0, [1, 1, 1], [1, 1, 1], 0, 0, 0, [[2, 1]]]),
    "time_mismatch": (K["time"], [[1e-5], 1e-5, 1e-5, 1e-5, 0.0, 0.0, 1, 2]),
}
here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "corpus", "job")
os.makedirs(out, exist_ok=True)
for name, (kind, value) in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([kind]) + msgpack.packb(value, use_bin_type=True))
