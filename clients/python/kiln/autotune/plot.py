"""--plot: best-so-far against trials and against time (matplotlib, imported only here)."""


def curve(records):
    """(trial, elapsed_s, best GFLOP/s so far) per record in trial order."""
    out, best = [], 0.0
    for r in sorted(records, key=lambda r: r.get("trial", 0)):
        res = r.get("result") or {}
        if res.get("ok") and (res.get("gflops") or 0) > best:
            best = res["gflops"]
        out.append((r.get("trial", len(out) + 1), r.get("elapsed_s", 0.0), best))
    return out


def plot(records, path, title=None):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError("--plot needs matplotlib (Debian: python3-matplotlib): %s" % e)
    groups = {}
    for r in records:
        groups.setdefault(r.get("series") or "trials", []).append(r)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for name, recs in groups.items():
        c = curve(recs)
        a.plot([x[0] for x in c], [x[2] for x in c], label=name)
        b.plot([x[1] for x in c], [x[2] for x in c], label=name)
    a.set_xlabel("trials")
    b.set_xlabel("seconds")
    for ax in (a, b):
        ax.set_ylabel("best GFLOP/s so far")
        ax.grid(True, alpha=0.3)
    if len(groups) > 1:
        a.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
