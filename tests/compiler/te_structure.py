#!/usr/bin/env python3
"""The shape of compiler/te (issue 12 item 5): no function over MAX_LINES lines, and no circle
among its files (file A calls a function defined in file B, which calls back into A, directly
or through others). Reads the sources only; exits 1 naming each offender.

    te_structure.py [compiler/te] [--self-test]
    te_structure.py server --prefix kiln_ --circles   (reports another folder's circles, the
                                                       edges that close them, exit 0)
    te_structure.py server --prefix kiln_ --no-circles --refs
        (the same report, exit 1 on any circle: the check of server/ in the test suite;
        --refs counts a function named without a call, in a table or as a callback, as a
        call: a dispatch table in one file names the handlers it depends on)

Function definitions are found as the C style of the tree writes them: a line at column 0 that
starts a declaration and opens its body (possibly after a wrapped parameter list), closed by
the next `}` at column 0. Calls are identifiers `te_*(` anywhere outside comments and strings.
"""

import argparse
import io
import os
import re
import sys

MAX_LINES = 60
DEF_RE = re.compile(r"^(?!static\b)(?:[A-Za-z_][\w \t\*]*?[ \t\*])?(te_\w+)\s*\(")
ANY_DEF_RE = re.compile(r"^(?:[A-Za-z_][\w \t\*]*?[ \t\*])?(\w+)\s*\(")
CALL_RE = re.compile(r"\b(te_\w+)\s*\(")


def strip(src):
    """The source without comments and string or char literals (newlines kept)."""
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    src = re.sub(r"//[^\n]*", "", src)
    return re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', src)


def functions(src):
    """(name, first line, length in lines) of every function defined in src (stripped)."""
    out = []
    lines = src.split("\n")
    i = 0
    while i < len(lines):
        m = ANY_DEF_RE.match(lines[i])
        if m and not lines[i].rstrip().endswith(";") and not lines[i].startswith(("typedef", "struct", "enum")):
            # the signature may wrap; it is a definition if a `{` comes before a `;`
            j = i
            while j < len(lines) and "{" not in lines[j] and not lines[j].rstrip().endswith(";"):
                j += 1
            if j < len(lines) and "{" in lines[j] and "=" not in lines[i].split("(")[0]:
                k = j
                while k < len(lines) and not lines[k].startswith("}"):
                    k += 1
                out.append((m.group(1), i + 1, k - i + 1))
                i = k
        i += 1
    return out


def check(files):
    """Problems found in {path: source}: long functions and circles between files."""
    problems = []
    stripped = {path: strip(src) for path, src in files.items()}
    defs = public_defs(stripped)
    for path, src in stripped.items():
        for name, line, n in functions(src):
            if n > MAX_LINES:
                problems.append("%s:%d: %s is %d lines (at most %d)" % (path, line, name, n, MAX_LINES))
    graph = {p: sorted({defs[c] for c in CALL_RE.findall(src) if defs.get(c, p) != p}) for p, src in stripped.items()}
    for comp in circles(graph):
        problems.append("a call circle among %s" % ", ".join(sorted(comp)))
    return problems


def circles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def self_test():
    """The checker finds what it should: a circle, a long function, and nothing in clean code."""
    a = "int te_a(int x) {\n  return te_b(x);\n}\n"
    b = "static int\nlocal(int y) {\n  return y;\n}\nint te_b(int x) {\n  return te_a(x) + local(x);\n}\n"
    probs = check({"a.c": a, "b.c": b})
    assert any("circle" in p and "a.c" in p and "b.c" in p for p in probs), probs
    b2 = "int te_b(int x) {\n  /* te_a(x) in a comment is no call */\n  return x + \"te_a(\"[0];\n}\n"
    assert check({"a.c": a, "b.c": b2}) == [], check({"a.c": a, "b.c": b2})
    long = "static int\nbig(int x,\n    int y) {\n" + "  x++;\n" * MAX_LINES + "  return x;\n}\n"
    probs = check({"c.c": long})
    assert len(probs) == 1 and "big is %d lines" % (MAX_LINES + 4) in probs[0], probs
    ok = "static int small(int x) {\n" + "  x++;\n" * (MAX_LINES - 3) + "  return x;\n}\n"
    assert check({"d.c": ok}) == [], check({"d.c": ok})
    # A table that names a function is an edge only when references count.
    table = "int te_c(int x) {\n  return x;\n}\nstatic int (*const fns[])(int) = {te_d};\n"
    d = "int te_d(int x) {\n  return te_c(x);\n}\n"
    assert check({"c.c": table, "d.c": d}) == []
    global CALL_RE
    saved = CALL_RE
    use_prefix("te_", refs=True)
    assert any("circle" in p for p in check({"c.c": table, "d.c": d}))
    with open(os.devnull, "w") as null:
        out, sys.stdout = sys.stdout, null
        try:
            assert report_circles({"c.c": table, "d.c": d}, strict=True) == 1
            assert report_circles({"c.c": table, "d.c": d}) == 0
            assert report_circles({"d.c": d}, strict=True) == 0
        finally:
            sys.stdout = out
    CALL_RE = saved
    # The command line: --help prints the usage and exits 0 (it once was taken for a folder).
    for argv, code, stream in ((["--help"], 0, "stdout"), (["--bogus"], 2, "stderr")):
        saved_stream = getattr(sys, stream)
        setattr(sys, stream, io.StringIO())
        try:
            parse_args(argv)
            raise AssertionError("%s did not exit" % argv)
        except SystemExit as e:
            assert e.code == code, (argv, e.code)
            assert "usage: te_structure.py" in getattr(sys, stream).getvalue(), argv
        finally:
            setattr(sys, stream, saved_stream)
    args = parse_args(["server", "--prefix", "kiln_", "--no-circles", "--refs"])
    assert (args.root, args.prefix, args.no_circles, args.refs, args.circles) == ("server", "kiln_", True, True, False)


def public_defs(stripped):
    """{function name: file} of the public (non-static) functions defined in stripped sources."""
    defs = {}
    for path, src in stripped.items():
        prev = ""
        for line in src.split("\n"):
            m = DEF_RE.match(line)
            if m and not line.rstrip().endswith(";") and not prev.startswith("static"):
                defs[m.group(1)] = path
            prev = line
    return defs


def use_prefix(prefix, refs=False):
    """Public functions are those named PREFIX*: the default is compiler/te's te_. With refs,
    any mention of one (a call, a table entry, a callback passed) is an edge."""
    global DEF_RE, CALL_RE
    DEF_RE = re.compile(r"^(?!static\b)(?:[A-Za-z_][\w \t\*]*?[ \t\*])?(%s\w+)\s*\(" % prefix)
    CALL_RE = re.compile((r"\b(%s\w+)\b" if refs else r"\b(%s\w+)\s*\(") % prefix)


def report_circles(files, strict=False):
    """Prints each circle among files and the calls inside it; returns 1 when strict and there
    is one, else 0."""
    stripped = {path: strip(src) for path, src in files.items()}
    defs = public_defs(stripped)
    calls = {p: {} for p in stripped}
    for p, src in stripped.items():
        for c in CALL_RE.findall(src):
            if defs.get(c, p) != p:
                calls[p].setdefault(defs[c], set()).add(c)
    comps = circles({p: sorted(calls[p]) for p in calls})
    for comp in comps:
        print("a call circle among %d of %d files: %s" % (len(comp), len(files), ", ".join(sorted(comp))))
        for p in sorted(comp):
            for q in sorted(calls[p]):
                if q in comp:
                    print("  %s -> %s: %s" % (p, q, " ".join(sorted(calls[p][q]))))
    if not comps:
        print("%d files: no call circle" % len(files))
    return 1 if strict and comps else 0


def parse_args(argv):
    """The command line; --help prints the module's usage and exits 0, an unknown option exits 2."""
    ap = argparse.ArgumentParser(
        prog="te_structure.py", description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", nargs="?", help="the folder whose .c files are read (default: compiler/te)")
    ap.add_argument("--prefix", help="public functions are those named PREFIX* (default: te_)")
    ap.add_argument("--self-test", action="store_true", help="check the checker and exit (with no folder)")
    ap.add_argument("--circles", action="store_true", help="report call circles among the files, exit 0")
    ap.add_argument("--no-circles", action="store_true", help="report call circles, exit 1 on any")
    ap.add_argument("--refs", action="store_true", help="a function named without a call counts as a call")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    strict = args.no_circles
    report = args.circles or strict
    self_test()
    if args.prefix or args.refs:
        use_prefix(re.escape(args.prefix or "te_"), args.refs)
    if args.self_test and not args.root:
        print("self-test passed")
        return 0
    root = args.root or os.path.join(os.path.dirname(__file__), "..", "..", "compiler", "te")
    if not os.path.isdir(root):
        print("te_structure.py: %s is not a folder" % root, file=sys.stderr)
        return 2
    files = {}
    for name in sorted(os.listdir(root)):
        if name.endswith(".c"):
            with open(os.path.join(root, name)) as f:
                files[name] = f.read()
    if not files:
        print("no .c files under %s" % root)
        return 1
    if report:
        return report_circles(files, strict)
    problems = check(files)
    for p in problems:
        print(p)
    nfun = sum(len(functions(strip(s))) for s in files.values())
    print("%d files, %d functions: %s" % (len(files), nfun, "ok" if not problems else "%d problems" % len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
