"""The grid's and the feature rows' tables, geomeans, and the JSON file."""
import json
import math
import os
import sys

from .common import GRID_DTYPES, HEAD_DIMS, IMPLS, SDPA_BACKENDS, note
from .features import FEATURE_BAR, FEATURE_TABLE_HEAD

# ---------------------------------------------------------------------------------------------------
# Table and output
# ---------------------------------------------------------------------------------------------------

def ratios(tfl):
    """aotk / sdpa-flash and aotk / best SDPA backend, from a {impl: tflops} dict (None when missing)."""
    a = tfl.get("aotk")
    flash = tfl.get("sdpa-flash")
    sdpa = [tfl[name] for name, _ in SDPA_BACKENDS if name in tfl]
    r_flash = a / flash if a is not None and flash else None
    r_best = a / max(sdpa) if a is not None and sdpa else None
    return r_flash, r_best


def table_head():
    """The grid table's head: IMPLS (flex only with --flex) and the ratios (aotk/flex only with --flex)."""
    return (f"{'op':>4} {'d':>4} {'causal':>6} {'seqlen':>6} |" + "".join(f" {name:>14}" for name in IMPLS)
            + f" | {'aotk/flash':>10} {'aotk/best':>10}" + (f" {'aotk/flex':>10}" if "flex" in IMPLS else ""))


def table_line(case, tfl, failure):
    s = (f"{case['op']:>4} {case['head_dim']:>4} {('yes' if case['causal'] else 'no'):>6} "
         f"{case['seqlen_q']:>6} |")
    s += "".join(f" {tfl[name]:>14.1f}" if name in tfl else f" {'-':>14}" for name in IMPLS)
    r_flash, r_best = ratios(tfl)
    s += " | " + (f"{r_flash:>9.2f}x" if r_flash else f"{'-':>10}") + " " + (
        f"{r_best:>9.2f}x" if r_best else f"{'-':>10}")
    if "flex" in IMPLS:
        s += f" {tfl['aotk'] / tfl['flex']:>9.2f}x" if "aotk" in tfl and "flex" in tfl else f" {'-':>10}"
    if failure:
        s += f"   FAILED: {failure}"
    return s


def print_table(lines, summary):
    print("\nTFLOP/s (forward: 4*b*h*sq*sk*d, halved for causal; backward: 2.5 x forward); ratios are aotk's "
          "TFLOP/s over the SDPA one's" + (" (aotk/flex: over compiled FlexAttention's; not in the geomeans)"
                                          if "flex" in IMPLS else ""))
    print(table_head())
    print("-" * len(table_head()))
    for line in lines:
        print(line)
    for line in summary:
        print(line)
    sys.stdout.flush()


def print_feature_table(lines, bar_lines):
    print(f"\nFeature rows, TFLOP/s = score pairs computed x 2 x (head_dim_qk + head_dim_v) / time (backward: "
          f"2.5x that); 'x plain' = aotk's TFLOP/s over the plain row of the same head dim and grid seqlen in "
          f"this run (bar: >= {FEATURE_BAR:.2f}); density = pairs computed / pairs of the unmasked row; "
          f"the SDPA columns are anchors where SDPA can do the same work")
    print(FEATURE_TABLE_HEAD)
    print("-" * len(FEATURE_TABLE_HEAD))
    for line in lines:
        print(line)
    for line in bar_lines:
        print(line)
    sys.stdout.flush()


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def gpu_slug(name):
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in name.lower())


def write_results(path, doc, ops_run):
    """Writes doc to path. Rows of ops this run did not run are kept from the file already there (same
    GPU, same day), so `--features` after a grid run, or the reverse, leaves one file with both; so are
    grid rows of dtypes or head dims this run did not run."""
    kept = []
    if os.path.exists(path):
        try:
            with open(path) as f:
                old = json.load(f)
            # The grid's rows of a dtype or head dim this run left out stay too (--dtypes fp16 after a bf16
            # run; --head-dims 64,128 after a --head-dims 192 run).
            kept = [r for r in old.get("rows", []) if r.get("op") not in ops_run
                    or (r.get("op") in ("fwd", "bwd")
                        and (r.get("dtype") not in GRID_DTYPES or r.get("head_dim") not in HEAD_DIMS))]
        except (OSError, ValueError) as e:
            note(f"could not read the earlier {path} ({e}); its rows are not kept")
    if kept:
        note(f"kept {len(kept)} rows of op(s) {', '.join(sorted({r['op'] for r in kept}))} from the earlier run")
    doc = dict(doc, rows=kept + doc["rows"])
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return len(doc["rows"])
