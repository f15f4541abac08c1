#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_frame.c to corpus/frame/ (standard library only).

Each seed is: a mode byte (limits), a split seed byte, then a stream of MessagePack-RPC
messages: every message kind, tensors, wide encodings, and the malformed shapes the
protocol tests use."""
import os
import struct


def pack(v):
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        if 0 <= v <= 0x7F:
            return bytes([v])
        if -32 <= v < 0:
            return struct.pack("b", v)
        if v >= 0:
            for code, fmt, lim in ((0xCC, ">B", 1 << 8), (0xCD, ">H", 1 << 16),
                                   (0xCE, ">I", 1 << 32), (0xCF, ">Q", 1 << 64)):
                if v < lim:
                    return bytes([code]) + struct.pack(fmt, v)
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode()
        if len(b) < 32:
            return bytes([0xA0 | len(b)]) + b
        return (b"\xd9" + bytes([len(b)]) if len(b) < 256 else b"\xda" + struct.pack(">H", len(b))) + b
    if isinstance(v, (bytes, bytearray)):
        if len(v) < 256:
            return b"\xc4" + bytes([len(v)]) + v
        if len(v) < 65536:
            return b"\xc5" + struct.pack(">H", len(v)) + v
        return b"\xc6" + struct.pack(">I", len(v)) + v
    if isinstance(v, (list, tuple)):
        head = bytes([0x90 | len(v)]) if len(v) < 16 else b"\xdc" + struct.pack(">H", len(v))
        return head + b"".join(pack(x) for x in v)
    if isinstance(v, dict):
        head = bytes([0x80 | len(v)]) if len(v) < 16 else b"\xde" + struct.pack(">H", len(v))
        return head + b"".join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError(v)


def tensor(dtype, shape, size):
    return {"dtype": dtype, "shape": shape, "data": bytes(range(size % 256)) * (size // 256) + bytes(size % 256)}


valid = {
    "ping": [0, 1, "ping", []],
    "hello": [0, 2, "hello", [{"version": 1, "client": "fuzz", "token": "t"}]],
    "bin_method": None,  # filled below (bytes method)
    "nil_params": [0, 4, "devices", None],
    "bare_map": [0, 5, "alloc", {"dtype": "float32", "shape": [4]}],
    "upload": [0, 6, "upload", [{"device": "cpu:0", "tensor": tensor("float32", [2, 3], 24)}]],
    "upload_0d": [0, 7, "upload", [{"tensor": tensor("float64", [], 8)}]],
    "upload_empty": [0, 8, "upload", [{"tensor": tensor("int8", [3, 0], 0)}]],
    "write": [0, 9, "write", [{"id": 0x7123456789ABCDEF, "offset": 4, "data": b"\x01\x02\x03\x04"}]],
    "read": [0, 10, "read", [{"id": 1, "offset": 0, "size": 16}]],
    "result": [1, 11, None, "pong"],
    "error": [1, 12, [1, "field 'x' is bad"], None],
    "result_map": [1, 13, None, {"id": 42, "dtype": "int32", "shape": [1]}],
    "notification": [2, "error", [{"code": 1, "message": "bad"}]],
    "msgid_max": [0, 0xFFFFFFFF, "ping", []],
    "floats": [0, 14, "f", [{"x": 1.5, "n": -7, "b": True}]],
}
valid["bin_method"] = [0, 3, b"ping", []]

malformed = {
    "c1": b"\xc1",
    "c1_inside": b"\x94\x00\x07\xc1",
    "deep": b"\x91" * 64,
    "array_2p32": b"\xdd\xff\xff\xff\xff" + b"\xc0" * 10,
    "bin_4g": b"\xc6\xff\xff\xff\xff" + bytes(range(10)),
    "ext_4g": b"\xc9\xff\xff\xff\xff\x01" + bytes(range(10)),
    "short": pack([0, 7]),
    "msgid_neg": pack([0, -1, "m", []]),
    "msgid_big": pack([0, 1 << 32, "m", []]),
    "method_int": pack([0, 7, 5, []]),
    "params_int": pack([0, 7, "m", 5]),
    "params_two": pack([0, 7, "m", [{}, {}]]),
    "dup_field": b"\x94\x00\x07\xa5alloc\x91\x82\xa2id\x01\xc4\x02id\x02",
    "bad_dtype": pack([0, 7, "upload", [{"tensor": tensor("float", [1], 4)}]]),
    "overflow_shape": pack([0, 7, "upload", [{"tensor": {"dtype": "float32", "shape": [1 << 32, 1 << 32], "data": b""}}]]),
    "too_many_dims": pack([0, 7, "upload", [{"tensor": {"dtype": "int8", "shape": [1] * 33, "data": b"x"}}]]),
    "truncated": pack([0, 7, "upload", [{"tensor": tensor("float32", [4], 16)}]])[:-5],
}

# Valid, but not what a packer emits: wide encodings and ext types.
raw_valid = {
    "wide": bytes([0xDC, 0, 4, 0xCC, 0, 0xCE, 0, 0, 1, 0, 0xDB, 0, 0, 0, 4]) + b"ping"
            + bytes([0xDD, 0, 0, 0, 1, 0xDF, 0, 0, 0, 1, 0xD9, 1]) + b"k" + bytes([0xC5, 0, 2, 0xFF, 0xFE]),
    "ext": pack([0, 7, "m", []])[:-1] + b"\x91\x81\xa1e" + b"\xd4\x01\x02",
}

here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "corpus", "frame")
os.makedirs(out, exist_ok=True)
seeds = {}
for name, msg in valid.items():
    seeds["valid_" + name] = (0x00, 1, pack(msg))
for name, raw in raw_valid.items():
    seeds["valid_" + name] = (0x00, 5, raw)
for name, raw in malformed.items():
    seeds["bad_" + name] = (0x00, 3, raw)
stream = b"".join(pack(m) for m in valid.values())
seeds["stream_all"] = (0x00, 7, stream)
seeds["stream_small_limits"] = (0x07 | (3 << 3), 9, stream)
seeds["stream_tiny_buffer"] = (0x80, 11, stream + malformed["c1"])
for name, (mode, seed, body) in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes([mode, seed]) + body)
print(len(seeds), "seeds in", out)

# --- corpus/request (fuzz_request.c): one connection's byte stream of real requests ----------
ROOT = os.path.dirname(os.path.dirname(here))
vadd = open(os.path.join(ROOT, "clients", "python", "examples", "vadd.ll"), "rb").read()
MODULE = "3f" * 32
launch = {"module": MODULE, "kernel": "vadd", "device": "cpu:0", "grid": [4], "block": [64],
          "args": [{"tensor": 1}, {"tensor": 2}, {"tensor": 3}, 256]}
requests = {
    "compile": [0, 1, "compile", [{"ir": vadd, "target": "cpu"}]],
    "compile_str": [0, 2, "compile", [{"ir": vadd.decode(), "target": "gfx942", "format": "llvm",
                                       "options": {"opt_level": "O2", "max_block": 256, "fast_math": True}}]],
    "compile_device": [0, 3, "compile", [{"ir": vadd, "target": "cpu:0", "options": {"opt_level": 1}}]],
    "compile_batch": [0, 4, "compile_batch", [{"items": [{"ir": vadd, "target": "cpu"},
                                                         {"ir": b"bad", "target": "sm_90"}]}]],
    "launch": [0, 5, "launch", [launch]],
    "launch_nowait": [0, 6, "launch", [dict(launch, wait=False, shared=1024, grid=[1, 2, 3])]],
    "time": [0, 7, "time", [dict(launch, number=10, repeat=3, min_repeat_ms=1, warmup=1, flush=True)]],
    "alloc": [0, 8, "alloc", [{"device": "cpu:0", "dtype": "float32", "shape": [256]}]],
    "upload": [0, 9, "upload", [{"device": "cpu:0", "tensor": tensor("float32", [64], 256)}]],
    "bad_opt": [0, 10, "compile", [{"ir": vadd, "options": {"opt_level": 9}}]],
    "bad_format": [0, 11, "compile", [{"ir": vadd, "format": "elf"}]],
    "bad_grid": [0, 12, "launch", [dict(launch, grid=[0])]],
    "bad_field": [0, 13, "launch", [dict(launch, colour="red")]],
    "bad_repeat": [0, 14, "time", [dict(launch, repeat=10 ** 7)]],
    "empty_ir": [0, 15, "compile", [{"ir": b""}]],
}
rout = os.path.join(here, "corpus", "request")
os.makedirs(rout, exist_ok=True)
for name, msg in requests.items():
    with open(os.path.join(rout, name), "wb") as f:
        f.write(pack(msg))
with open(os.path.join(rout, "stream_all"), "wb") as f:
    f.write(b"".join(pack(m) for m in requests.values()))

# --- corpus/tokens (fuzz_tokens.c): tokens files as docs/operations.md writes them -----------
tokens = {
    "doc_example": "# TOKEN[,TOKEN...]        TENANT   [key=value ...]\n"
                   "k7Qm2v0YwRr1c9TzLq4s      alice    devices=cuda:0,cpu memory=16G tensors=10000 launches=256\n"
                   "tuner-9f1c3e7d20aa55b1    tuner    compiles=64 message=256M connections=32\n",
    "two_tokens": "aaaaaaaaaaaaaaaa1,bbbbbbbbbbbbbbbb2 team devices=all memory=unlimited\n\n# end\n",
    "crlf": "tok-0123456789abcdef t1 memory=1KiB\r\ntok-fedcba9876543210 t2 tensors=5 launches=0\r\n",
    "chaos": "".join("chaos-token-%02d-0123456789 tenant%d compiles=8\n" % (i, i) for i in range(1, 5)),
    "bad_short": "short alice\n",
    "bad_dup": "aaaaaaaaaaaaaaaa x\naaaaaaaaaaaaaaaa y\n",
    "bad_unit": "aaaaaaaaaaaaaaaa x memory=12Q\n",
    "bad_option": "aaaaaaaaaaaaaaaa x colour=red\n",
}
tout = os.path.join(here, "corpus", "tokens")
os.makedirs(tout, exist_ok=True)
for name, text in tokens.items():
    with open(os.path.join(tout, name), "w") as f:
        f.write(text)
print(len(requests) + 1, "request seeds,", len(tokens), "tokens seeds")
