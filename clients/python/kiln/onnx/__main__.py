"""python3 -m kiln.onnx MODEL.onnx --input x.npy [--device cuda:0] [--time]

Imports the model, runs it on the inputs (.npy files, in input order or NAME=PATH) and
prints each output's dtype and shape, the top-5 classes of a classifier output (one row of
scores), and with --time the graph's run time. Exit status 2 for bad arguments or input
kiln refuses, 1 for errors from kilnd."""

import argparse
import sys

import numpy as np


def _shape(s):
    name, _, dims = s.partition("=")
    if not dims:
        raise argparse.ArgumentTypeError("--input-shape is NAME=D0,D1,...")
    return name, tuple(int(d) for d in dims.split(","))


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m kiln.onnx", description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--input", action="append", default=[], help=".npy file, in input order, or NAME=PATH")
    ap.add_argument("--input-shape", action="append", default=[], type=_shape, help="NAME=D0,D1,... (dynamic dims)")
    ap.add_argument("--device", default="cpu:0")
    ap.add_argument("--url", default=None, help="kilnd address (default: $KILN_URL, the default socket, "
                                                "or a private kilnd)")
    ap.add_argument("--time", action="store_true", help="time the graph (10 runs x 3)")
    ap.add_argument("--save", help="write the outputs to this .npz")
    ap.add_argument("--graph", action="store_true", help="print the fused graph")
    a = ap.parse_args(argv)

    import kiln
    import kiln.onnx
    arrays, named = [], {}
    try:
        for spec in a.input:
            name, sep, path = spec.partition("=")
            if not sep:
                path, name = spec, None
            try:
                arr = np.load(path)
            except (OSError, ValueError) as e:
                print("kiln.onnx: cannot read input %s: %s" % (path, e), file=sys.stderr)
                return 2
            if name:
                named[name] = arr
            else:
                arrays.append(arr)
        s = kiln.connect(a.url)
        dev = s.device(a.device)
        shapes = dict(a.input_shape) or None
        if shapes is None and (arrays or named):
            # fixed by the inputs given: their shapes are the graph's
            from kiln.onnx import load
            m = load(a.model)
            init = {t.name for t in m.graph.initializer}
            names = [i.name for i in m.graph.input if i.name not in init]
            shapes = dict(zip(names, [x.shape for x in arrays]))
            shapes.update({k: v.shape for k, v in named.items()})
        g = kiln.onnx.import_model(a.model, dev, input_shapes=shapes, session=s)
        if a.graph:
            print(g)
        outs = g.run(*arrays, **named) if not named else g.run(**named)
    except kiln.InvalidArgument as e:
        print("kiln.onnx: %s" % e, file=sys.stderr)
        return 2
    except kiln.KilnError as e:
        print("kiln.onnx: %s" % e, file=sys.stderr)
        return 1
    print("%s on %s: %d kernels (%s executor)" % (a.model, dev.id, len(g.nodes), g.executor))
    for name, o in zip(g.outputs, outs):
        print("%s: %s %s" % (name, o.dtype, list(o.shape)))
        if o.dtype.kind == "f" and o.ndim == 2 and o.shape[0] == 1 and o.shape[1] >= 5:
            top = np.argsort(-o[0], kind="stable")[:5]
            print("  top-5: %s" % " ".join(str(int(t)) for t in top))
            for t in top:
                print("    %5d  %.4f" % (t, o[0, t]))
    if a.save:
        np.savez(a.save, **{n: o for n, o in zip(g.outputs, outs)})
    if a.time:
        r = g.time_evaluator(number=10, repeat=3)()
        print("time: mean %.3f ms, median %.3f ms, min %.3f ms (%s executor)"
              % (r.mean * 1e3, r.median * 1e3, r.min * 1e3, g.executor))
    return 0


if __name__ == "__main__":
    sys.exit(main())
