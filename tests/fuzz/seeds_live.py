#!/usr/bin/python3
"""Writes the seed corpora that need kiln's own outputs, made by a real kilnd:
  corpus/codeobj/   HSACO (gfx942, gfx90a), PTX (sm_90) and a cpu shared object that kiln built,
                    each behind the fuzz_codeobj.c mode and target bytes, plus the HSACO
                    for the metadata-only mode;
  corpus/artifact/  the encoded artifacts from kilnd's cache files (the payload after the
                    88-byte header, docs/cache.md).
Run with Debian's python3 (python3-msgpack): tests/fuzz/seeds_live.py [KILND]"""
import glob
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import kiln  # noqa: E402

VADD = open(os.path.join(ROOT, "clients", "python", "examples", "vadd.ll")).read()
SAXPY = """
define void @saxpy(ptr %y, ptr %x, float %a, i32 %n) section "kiln.kernel" {
entry:
  %g = call i32 @__kiln_group_id(i32 0)
  %s = call i32 @__kiln_group_size(i32 0)
  %l = call i32 @__kiln_local_id(i32 0)
  %m = mul i32 %g, %s
  %i = add i32 %m, %l
  %c = icmp slt i32 %i, %n
  br i1 %c, label %body, label %done
body:
  %px = getelementptr float, ptr %x, i32 %i
  %py = getelementptr float, ptr %y, i32 %i
  %vx = load float, ptr %px
  %vy = load float, ptr %py
  %t = fmul float %a, %vx
  %r = fadd float %t, %vy
  store float %r, ptr %py
  br label %done
done:
  ret void
}
declare i32 @__kiln_group_id(i32)
declare i32 @__kiln_group_size(i32)
declare i32 @__kiln_local_id(i32)
"""


def write(sub, name, data):
    d = os.path.join(HERE, "corpus", sub)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    exe = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "server", "kilnd")
    tmp = tempfile.mkdtemp(prefix="kiln-seeds-")
    with kiln.start_daemon(exe, tmpdir=tmp) as d:
        s = kiln.connect(d.url)
        n = 0
        # fuzz_codeobj.c: byte 0 = mode (0 hsaco, 1 ptx, 2 cpu-so, 3 metadata), byte 1 = target
        # index into its lists (amd: gfx942, gfx90a, ...; nv: sm_90, ...).
        for name, ir in (("vadd", VADD), ("saxpy", SAXPY)):
            for target, pick in (("gfx942", 0), ("gfx90a", 1)):
                code = s.compile(ir, target=target).get_source("hsaco")
                write("codeobj", "hsaco_%s_%s" % (name, target), bytes([0, pick]) + code)
                write("codeobj", "meta_%s_%s" % (name, target), bytes([3, pick]) + code)
                n += 2
            ptx = s.compile(ir, target="sm_90").get_source("ptx").encode()
            write("codeobj", "ptx_%s_sm_90" % name, bytes([1, 0]) + ptx)
            so = s.compile(ir, target="cpu").get_source("binary")
            write("codeobj", "cpuso_%s" % name, bytes([2, 0]) + so)
            n += 2
        s.close()
    # After the drain every cache write is whole and renamed.
    files = sorted(glob.glob(os.path.join(tmp, "cache", "objects", "*", "*")))
    for i, path in enumerate(files):
        with open(path, "rb") as f:
            data = f.read()
        write("artifact", "cached_%d" % i, data[88:])
    shutil.rmtree(tmp)
    print("%d code objects, %d artifacts" % (n, len(files)))


main()
