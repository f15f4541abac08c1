"""``TeModule.export_library(path)`` and ``kiln.load_module(path)``: a built te module in one
file, loadable by another client or another daemon without compiling it again.

The file is MessagePack: ``{"kiln_module": 1, "content": bin, "sha256": hex}`` where content is
itself MessagePack of ``{"target", "format" ("cpu-so", "hsaco", "ptx"), "code" (the code object
kilnd built), "program" (the te program map: tensors, shapes, kernels), "nargs" (how many of
a kernel's arguments are the caller's; the rest are buffers the module allocates), "launch"
({kernel name: launch recipe})}``. Loading checks the hash, rebuilds the argument list from
the program and hands the code object to the daemon as a prebuilt payload (docs/kernels.md
§1), so nothing is compiled.
"""

import hashlib

import msgpack

from ..errors import InvalidArgument
from . import expr as X
from .tensor import placeholder, var

__all__ = ["export_library", "load_module"]

_FORMATS = {"cpu": "cpu-so", "gfx": "hsaco", "sm_": "ptx"}


def _format(target):
    for prefix, fmt in _FORMATS.items():
        if str(target).startswith(prefix):
            return fmt
    raise InvalidArgument("export_library: no code object format for target %s" % target)


def export_library(mod, path):
    """Writes TeModule ``mod`` to ``path`` (any name; TVM's ``lib.so`` works)."""
    fmt = _format(mod.module.target)
    code = mod.module.get_source("binary")
    if isinstance(code, str):
        code = code.encode()
    content = msgpack.packb({"target": str(mod.module.target), "format": fmt, "code": bytes(code),
                             "program": mod.program, "nargs": len(mod.prog.args),
                             "launch": {name: recipe for name, _, recipe in mod._recipes}}, use_bin_type=True)
    blob = msgpack.packb({"kiln_module": 1, "content": content, "sha256": hashlib.sha256(content).hexdigest()},
                         use_bin_type=True)
    with open(path, "wb") as f:
        f.write(blob)


def _read(path_or_bytes):
    if isinstance(path_or_bytes, (bytes, bytearray)):
        blob = bytes(path_or_bytes)
    else:
        with open(path_or_bytes, "rb") as f:
            blob = f.read()
    try:
        outer = msgpack.unpackb(blob, raw=False)
        ok = isinstance(outer, dict) and outer.get("kiln_module") == 1 and isinstance(outer.get("content"), bytes)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        ok = False
    if not ok:
        raise InvalidArgument("load_module: not a module file written by export_library")
    if hashlib.sha256(outer["content"]).hexdigest() != outer.get("sha256"):
        raise InvalidArgument("load_module: the module file is damaged (its sha256 does not match)")
    c = msgpack.unpackb(outer["content"], raw=False)
    if not isinstance(c, dict) or not {"target", "format", "code", "program", "nargs", "launch"} <= set(c):
        raise InvalidArgument("load_module: the module file lacks fields")
    return c


def _expr(w, env):
    """A shape expression of the payload as a te expression over the vars in env."""
    if isinstance(w, bool) or not isinstance(w, (int, list)):
        raise InvalidArgument("load_module: a shape in the module file is not an index expression")
    if isinstance(w, int):
        return X.IntImm(w, "int32", implicit=True)
    if w[0] == "var":
        return env[w[1]]
    if w[0] == "const":
        return X.IntImm(int(w[2]), w[1])
    ops = {"add": "add", "sub": "sub", "mul": "mul", "floordiv": "floordiv", "floormod": "floormod",
           "min": "min", "max": "max", "div": "truncdiv", "mod": "truncmod"}
    if w[0] not in ops or len(w) != 3:
        raise InvalidArgument("load_module: shape expression %r is not supported" % (w,))
    return X._binary(ops[w[0]], _expr(w[1], env), _expr(w[2], env))


class _Program:
    """What a TeModule needs of a lowered program, rebuilt from the payload map."""

    def __init__(self, program, nargs):
        self.program = program
        self.kernels = program["kernels"]
        env = {v["name"]: var(v["name"], v.get("dtype", "int32")) for v in program["vars"]}
        tensors = {}
        for t in program["tensors"]:
            tensors[t["name"]] = placeholder(tuple(_expr(d, env) for d in t["shape"]), t["dtype"], t["name"])
        wire = self.kernels[0]["args"]
        objs = []
        for name in wire:
            if name in env:
                objs.append(env[name])
            elif name in tensors:
                objs.append(tensors[name])
            else:
                raise InvalidArgument("load_module: kernel argument %s is not in the program" % name)
        self.args, self.temps = objs[:nargs], objs[nargs:]
        self.shape_vars = list(env.values())
        self.names = {id(o): n for n, o in zip(wire, objs)}
        self.names.update({id(v): n for n, v in env.items()})


def load_module(path, session=None):
    """A TeModule from a file export_library wrote (or its bytes), loaded into ``session``
    (default: the process's) for the target it was built for."""
    from ..session import default_session
    from .build import TeModule
    c = _read(path)
    session = session or default_session()
    prog = _Program(c["program"], int(c["nargs"]))
    module = session.compile(c["code"], target=c["target"], format=c["format"])
    return TeModule(session, prog, module, c["target"], recipes=c["launch"])
