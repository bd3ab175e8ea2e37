"""Plots a bench_attn.py result file: TFLOP/s vs seqlen, one line per impl.

    python3 bench/plot_results.py bench/results/X.json [-o X.png]

Writes X.png beside X.json (or where -o says). One panel per (op, dtype, head_dim, causal): rows are
(op, dtype, head_dim), columns are causal no / yes, so a forward-only file gives 2x2 panels.
When the file has feature rows (ops fwd_feat / bwd_feat), also writes X-features.png: per (op, grid
seqlen), aotk's TFLOP/s over the plain row of the same head dim, one bar per row, with the 0.90 bar
drawn. When it has selection rows (ops sel_fwd / sel_bwd), also writes X-selection.png: per op, the time
of aotk's selection and of the dense causal anchors vs tokens, and aotk's speedup over them with the
bars marked. Runs on a CPU machine; needs only matplotlib.
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


FEATURE_BAR = 0.90  # aotk_bench/features.py's FEATURE_BAR
SEL_OPS = ("sel_fwd", "sel_bwd")  # aotk_bench/selection.py's SEL_OPS; their rows carry their own bars


def versions_line(doc):
    versions = f"torch {doc.get('torch', '?')}, triton {doc.get('triton', '?')}"
    if doc.get("aotk_triton"):
        versions += f", aotk kernels by triton {doc['aotk_triton']}"
    return f"{doc.get('gpu', '?')}  {doc.get('date', '')}  ({versions})"


def plot_features(plt, doc, rows, out):
    """aotk's ratio_to_plain per feature row: panels (op, grid seqlen), one horizontal bar per row in
    run order, green at or above the bar, red below, grey for the plain (base) and context rows."""
    aotk = [r for r in rows if r["impl"] == "aotk" and r.get("ratio_to_plain") is not None]
    if not aotk:
        print("no aotk feature rows with a ratio to plot")
        return
    panels = sorted({(r["op"], r["grid_seqlen"]) for r in aotk}, key=lambda k: (k[0] != "fwd_feat", k[1]))
    ops = sorted({op for op, _ in panels}, key=lambda op: op != "fwd_feat")
    seqlens = sorted({n for _, n in panels})
    per_panel = max(sum(1 for r in aotk if (r["op"], r["grid_seqlen"]) == p) for p in panels)
    fig, axes = plt.subplots(len(ops), len(seqlens), figsize=(6.5 * len(seqlens), 0.28 * per_panel * len(ops) + 1.6),
                             squeeze=False)
    xmax = max(1.3, max(r["ratio_to_plain"] for r in aotk) * 1.15)
    for i, op in enumerate(ops):
        for j, n in enumerate(seqlens):
            ax = axes[i][j]
            sel = [r for r in aotk if (r["op"], r["grid_seqlen"]) == (op, n)]
            labels, values, colors = [], [], []
            for r in sel:
                dims = str(r["head_dim_qk"]) + (f"/{r['head_dim_v']}" if r["head_dim_v"] != r["head_dim_qk"] else "")
                labels.append(f"{r['feature']} d={dims}")
                values.append(r["ratio_to_plain"])
                role = r.get("role", "feature")
                colors.append("tab:gray" if role != "feature" else
                              "tab:green" if r["ratio_to_plain"] >= FEATURE_BAR else "tab:red")
            ys = list(range(len(sel)))[::-1]
            ax.barh(ys, values, color=colors)
            for y, r in zip(ys, sel):
                ax.text(r["ratio_to_plain"] + 0.01, y, f"{r['ratio_to_plain']:.2f} ({r['tflops']:.0f} TF/s)",
                        va="center", fontsize=7)
            ax.set_yticks(ys)
            ax.set_yticklabels(labels, fontsize=7)
            ax.axvline(FEATURE_BAR, color="k", linestyle="--", linewidth=1)
            ax.axvline(1.0, color="tab:gray", linewidth=0.8)
            ax.set_xlim(0, xmax)
            ax.grid(True, axis="x", alpha=0.3)
            ax.set_title(f"{op} grid seqlen {n}: aotk TFLOP/s / plain (same head dim)", fontsize=9)
            if not sel:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(versions_line(doc) + f"; dashed: the {FEATURE_BAR:.2f} bar", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def token_label(n):
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def plot_selection(plt, doc, rows, out):
    """Selection rows: per op (figure rows), the ms of aotk (selection) and of the SDPA anchors (dense
    causal, same q, k, v) vs tokens, log-log; and aotk's speedup over each anchor, with each bar the row
    records (bar_vs_flash) drawn as a marker at its token count."""
    # Issue 5's draw only (its bars are on it): rows of issue 12's other index distributions would
    # put several points on one token count.
    rows = [r for r in rows if r.get("index_distribution", "uniform-causal") == "uniform-causal"]
    ops = [op for op in SEL_OPS if any(r["op"] == op for r in rows)]
    seqlens = sorted({r["seqlen_q"] for r in rows})
    fig, axes = plt.subplots(len(ops), 2, figsize=(12.0, 3.9 * len(ops)), squeeze=False)
    for i, op in enumerate(ops):
        sel = [r for r in rows if r["op"] == op]
        ax = axes[i][0]
        for impl in sorted({r["impl"] for r in sel}, key=impl_key):
            pts = sorted((r["seqlen_q"], r["ms"]) for r in sel if r["impl"] == impl)
            label = impl + (" (selection)" if impl == "aotk" else " (dense causal)")
            ax.plot(*zip(*pts), label=label, markersize=5, **STYLE.get(impl, dict(marker="x")))
        ax.set_yscale("log")
        ax.set_ylabel("ms")
        ax.set_title(f"{op}: time", fontsize=10)
        ax = axes[i][1]
        aotk = sorted((r for r in sel if r["impl"] == "aotk"), key=lambda r: r["seqlen_q"])
        for key, impl in (("speedup_vs_flash", "sdpa-flash"), ("speedup_vs_cudnn", "sdpa-cudnn")):
            pts = [(r["seqlen_q"], r[key]) for r in aotk if r.get(key)]
            if pts:
                ax.plot(*zip(*pts), label=f"aotk vs {impl}", markersize=5,
                        **dict(STYLE.get(impl, {}), linewidth=2.0))
        for n_bar, r in ((r["seqlen_q"], r) for r in aotk if r.get("bar_vs_flash")):
            bar = r["bar_vs_flash"]
            ax.plot([n_bar], [bar["speedup"]], marker="_", markersize=22, markeredgewidth=2.5, color="k",
                    linestyle="none")
            verdict = r.get("verdict") or "-"
            ax.annotate(f"bar {'>' if bar['strict'] else '>='}{bar['speedup']:g}x: {verdict}", (n_bar, bar["speedup"]),
                        textcoords="offset points", xytext=(6, -12), fontsize=8)
        for r in aotk:
            if r.get("speedup_vs_flash"):
                ax.annotate(f"{r['speedup_vs_flash']:.2f}x", (r["seqlen_q"], r["speedup_vs_flash"]),
                            textcoords="offset points", xytext=(-10, 7), fontsize=8, color="tab:blue")
        ax.axhline(1.0, color="tab:gray", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylabel("speedup (anchor ms / aotk ms)")
        ax.set_title(f"{op}: aotk's speedup; black dash: the bar vs sdpa-flash", fontsize=10)
        for ax in axes[i]:
            ax.set_xscale("log", base=2)
            ax.set_xticks(seqlens)
            ax.set_xticklabels([token_label(n) for n in seqlens])
            ax.minorticks_off()
            ax.grid(True, alpha=0.3)
            ax.set_xlabel("tokens (one sequence)")
            ax.legend(fontsize=8)
    r0 = rows[0]
    fig.suptitle(versions_line(doc) + f"\nselection: heads {r0['heads_q']}/{r0['heads_kv']}, d {r0['head_dim']}, "
                 f"block {r0.get('block_size')}, {r0.get('slots')} slots, {r0.get('index_distribution')} indices",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Plot a bench_attn.py JSON result file.")
    ap.add_argument("json", help="a result file written by bench/bench_attn.py")
    ap.add_argument("-o", "--out", help="output PNG (default: the JSON's path with .png; the feature "
                                        "and selection figures add -features / -selection before .png)")
    args = ap.parse_args(argv)

    with open(args.json) as f:
        doc = json.load(f)
    all_rows = doc.get("rows", [])
    if not all_rows:
        sys.exit(f"{args.json}: no rows to plot")
    plt = load_pyplot()
    out = args.out or os.path.splitext(args.json)[0] + ".png"
    feature_rows = [r for r in all_rows if "feature" in r]
    if feature_rows:
        plot_features(plt, doc, feature_rows, os.path.splitext(out)[0] + "-features.png")
    sel_rows = [r for r in all_rows if r["op"] in SEL_OPS]
    if sel_rows:
        plot_selection(plt, doc, sel_rows, os.path.splitext(out)[0] + "-selection.png")
    rows = [r for r in all_rows if "feature" not in r and r["op"] not in SEL_OPS]  # the grid: ops fwd and bwd
    if not rows:
        return 0

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
    fig.suptitle(versions_line(doc), y=0.96, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.945))

    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
