"""Plots a bench_attn.py result file: TFLOP/s vs seqlen, one line per impl.

    python3 bench/plot_results.py bench/results/X.json [-o X.png]

Writes X.png beside X.json (or where -o says). One panel per (op, dtype, head_dim, causal): rows are
(op, dtype, head_dim), columns are causal no / yes, so a forward-only file gives 2x2 panels. Runs on a
CPU machine; needs only matplotlib.
"""
import argparse
import json
import os
import sys

IMPL_ORDER = ["aotk", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient"]
STYLE = {
    "aotk": dict(color="tab:red", marker="o", linewidth=2.4, zorder=5),
    "sdpa-flash": dict(color="tab:blue", marker="s", linewidth=1.4),
    "sdpa-cudnn": dict(color="tab:green", marker="^", linewidth=1.4),
    "sdpa-efficient": dict(color="tab:gray", marker="v", linewidth=1.4),
}


def load_pyplot():
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot_results.py needs matplotlib, which is not installed: pip install matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def impl_key(impl):
    return (IMPL_ORDER.index(impl) if impl in IMPL_ORDER else len(IMPL_ORDER), impl)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Plot a bench_attn.py JSON result file.")
    ap.add_argument("json", help="a result file written by bench/bench_attn.py")
    ap.add_argument("-o", "--out", help="output PNG (default: the JSON's path with .png)")
    args = ap.parse_args(argv)

    with open(args.json) as f:
        doc = json.load(f)
    rows = doc.get("rows", [])
    if not rows:
        sys.exit(f"{args.json}: no rows to plot")
    plt = load_pyplot()

    # Panels: rows of the figure are (op, dtype, head_dim), columns are causal False / True.
    panel_rows = sorted({(r["op"], r["dtype"], r["head_dim"]) for r in rows},
                        key=lambda k: (k[0] != "fwd", k[0], k[1], k[2]))
    causals = sorted({bool(r["causal"]) for r in rows})
    impls = sorted({r["impl"] for r in rows}, key=impl_key)
    seqlens = sorted({r["seqlen_q"] for r in rows})

    nr, nc = len(panel_rows), len(causals)
    fig, axes = plt.subplots(nr, nc, figsize=(6.0 * nc, 3.8 * nr), squeeze=False, sharex=True)
    ymax = max(r["tflops"] for r in rows) * 1.12
    for i, (op, dtype, d) in enumerate(panel_rows):
        for j, causal in enumerate(causals):
            ax = axes[i][j]
            sel = [r for r in rows if (r["op"], r["dtype"], r["head_dim"], bool(r["causal"])) == (op, dtype, d, causal)]
            for impl in impls:
                pts = sorted((r["seqlen_q"], r["tflops"]) for r in sel if r["impl"] == impl)
                if not pts:
                    continue
                xs, ys = zip(*pts)
                ax.plot(xs, ys, label=impl, markersize=5, **STYLE.get(impl, dict(marker="x")))
            ax.set_xscale("log", base=2)
            ax.set_xticks(seqlens)
            ax.set_xticklabels([f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n) for n in seqlens])
            ax.minorticks_off()
            ax.set_ylim(0, ymax)
            ax.grid(True, alpha=0.3)
            ax.set_title(f"{op} {dtype} head_dim={d} {'causal' if causal else 'non-causal'}", fontsize=10)
            if j == 0:
                ax.set_ylabel("TFLOP/s")
            if i == nr - 1:
                ax.set_xlabel("seqlen (batch = 16384 / seqlen)")
            if not sel:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)

    handles, labels = [], []
    for ax in axes.flat:
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in labels:
                handles.append(h)
                labels.append(l)
    order = sorted(range(len(labels)), key=lambda k: impl_key(labels[k]))
    fig.legend([handles[k] for k in order], [labels[k] for k in order], loc="upper center",
               ncol=len(labels), frameon=False, bbox_to_anchor=(0.5, 0.995))
    versions = f"torch {doc.get('torch', '?')}, triton {doc.get('triton', '?')}"
    if doc.get("aotk_triton"):
        versions += f", aotk kernels by triton {doc['aotk_triton']}"
    fig.suptitle(f"{doc.get('gpu', '?')}  {doc.get('date', '')}  ({versions})", y=0.96, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.945))

    out = args.out or os.path.splitext(args.json)[0] + ".png"
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
