"""The GQA ops "fwd_gqa" and "bwd_gqa": 32 query heads over 8 kv heads (issue 11's bar)."""
import ctypes
import sys
import traceback

from . import common
from .common import (AOTK_OP_ATTN_BWD, AOTK_OP_ATTN_FWD, BWD_REL_TOL, F, LSE_ATOL, OUT_ATOL, TOTAL_TOKENS, AotkError,
                     _sdpa_backend, current_stream, describe_tensor, empty_cache, fwd_params, loud, max_abs_diff,
                     note, rel_l2, sdpa_anchor_times, sdpa_kernel, synchronize, time_ms, torch)
from .grid import fwd_flops, fwd_reference
from .flex import FLEX_OPTIONS, flex_block_mask, flex_causal_mask, flex_run, to_bhsd

# ---------------------------------------------------------------------------------------------------
# ops "fwd_gqa" and "bwd_gqa": grouped-query attention, 32 query heads over 8 kv heads (issue 11's bar)
# ---------------------------------------------------------------------------------------------------
#
# Kept under their own op names, so the grid's rows (heads_q = heads_kv), its geomeans and its table stay
# what they were. bf16, head dim 128, causal, seqlen 8192, batch 2 (the grid's 16384 tokens per row).
# aotk takes k, v [b, s, 8, d] as they are (query head h reads kv head h // 4). SDPA's flash and cuDNN
# backends get the same tensors with enable_gqa=True (torch 2.11: both accept it, forward and backward,
# and read the 8 kv heads); a backend that refuses it gets k and v expanded to 32 heads beforehand
# (repeat_interleave, outside the timing), and the row's "gqa" field says which ("enable_gqa" or
# "expanded"). FlexAttention: causal block mask, enable_gqa=True.
# Checks, the grid's: the forward's out and lse against sdpa-flash on k, v expanded to 32 heads (the same
# math), the backward's dq, dk, dv against sdpa-flash's through autograd on the expansion (so dk, dv are
# summed over each group of 4, as GQA's are).

GQA_OPS = ("fwd_gqa", "bwd_gqa")
GQA_HEADS_Q = 32
GQA_HEADS_KV = 8
GQA_HEAD_DIM = 128
GQA_SEQLEN = 8192
GQA_CAUSAL = [True]
GQA_BAR = 1.0  # aotk's TFLOP/s over sdpa-cudnn's, forward and backward
GQA_ANCHORS = [("sdpa-flash", _sdpa_backend("FLASH_ATTENTION")), ("sdpa-cudnn", _sdpa_backend("CUDNN_ATTENTION"))]
GQA_IMPLS = ["aotk"] + [name for name, _ in GQA_ANCHORS] + ["flex"]


def gqa_cases(op, quick=False):
    """The rows of one GQA op (--quick runs the same: there is one)."""
    for causal in GQA_CAUSAL:
        yield {"op": op, "dtype": "bf16", "head_dim": GQA_HEAD_DIM, "causal": causal, "seqlen_q": GQA_SEQLEN,
               "seqlen_k": GQA_SEQLEN, "batch": TOTAL_TOKENS // GQA_SEQLEN, "heads_q": GQA_HEADS_Q,
               "heads_kv": GQA_HEADS_KV}


def gqa_label(case):
    return (f"{case['op']} {case['dtype']} d={case['head_dim']} causal={int(case['causal'])} "
            f"seqlen={case['seqlen_q']} batch={case['batch']} heads={case['heads_q']}/{case['heads_kv']}")


def gqa_flops(case):
    """The grid's count with heads_q (every query head does its own products): 4 b hq sq sk d, halved for
    causal, 2.5x for the backward."""
    return fwd_flops(case) * (2.5 if case["op"] == "bwd_gqa" else 1.0)


def gqa_run_case(case, aotk):
    """gqa_run_case_unguarded, with any exception turned into the row's failure."""
    try:
        return gqa_run_case_unguarded(case, aotk)
    except Exception as e:  # noqa: BLE001
        loud(f"ROW ABORTED, {gqa_label(case)}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return {}, f"{type(e).__name__}: {str(e)[:300]}", {}


def gqa_run_case_unguarded(case, aotk):
    """Checks aotk (the grid's check), times it, then the SDPA anchors and flex on the same q, k, v.
    Returns ({impl: ms}, failure or None, facts): aotk's kernel info and the anchors' layouts."""
    backward = case["op"] == "bwd_gqa"
    b, n, h, hkv, d, causal = (case["batch"], case["seqlen_q"], case["heads_q"], case["heads_kv"], case["head_dim"],
                               case["causal"])
    group = h // hkv
    dt = torch.bfloat16
    q = torch.randn(b, n, h, d, device=common.DEVICE, dtype=dt)
    k = torch.randn(b, case["seqlen_k"], hkv, d, device=common.DEVICE, dtype=dt)
    v = torch.randn_like(k)
    dout = torch.randn_like(q) if backward else None
    facts = {"layouts": {}}
    out = torch.empty_like(q)
    lse = torch.empty(b, h, n, device=common.DEVICE, dtype=torch.float32)
    params = fwd_params(q, k, v, out, lse, causal)
    params_ref = ctypes.byref(params)

    # The reference: sdpa-flash (or the first backend that runs) on k, v expanded to heads_q.
    ref = ref_lse = None
    ref_grads = {}
    if not backward:
        kx, vx = (y.repeat_interleave(group, dim=2).transpose(1, 2) for y in (k, v))
        ref, ref_lse, ref_name = fwd_reference(q.transpose(1, 2), kx, vx, causal)  # [b, h, s, d]
        del kx, vx
        if ref is None:
            return {}, "no SDPA backend ran, so aotk could not be checked", facts
    else:
        try:
            leaves = [x.detach().requires_grad_(True) for x in (q, k, v)]
            with sdpa_kernel(_sdpa_backend("FLASH_ATTENTION")):
                o = F.scaled_dot_product_attention(
                    leaves[0].transpose(1, 2), *(y.repeat_interleave(group, dim=2).transpose(1, 2) for y in leaves[1:]),
                    is_causal=causal)
            ref_grads = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(o, leaves, dout.transpose(1, 2))))
            del o, leaves
        except Exception as e:  # noqa: BLE001
            return {}, f"sdpa-flash's backward did not run ({type(e).__name__}), so aotk's could not be checked", facts
    empty_cache()

    results = {}
    try:
        if not backward:
            facts["info"] = aotk.query(AOTK_OP_ATTN_FWD, params)
            out.fill_(float("nan"))
            lse.fill_(float("nan"))
            aotk.attn_fwd(params_ref, current_stream())
            synchronize()
            err = max_abs_diff(out, ref.transpose(1, 2))
            if not err < OUT_ATOL[dt]:
                msg = f"aotk out differs from {ref_name}: max abs diff {err:.4g} (tolerance {OUT_ATOL[dt]})"
                loud(f"ROW ABORTED, {gqa_label(case)}: {msg}")
                return {}, msg, facts
            lse_txt = ""
            if ref_lse is not None:
                lse_err = max_abs_diff(lse, ref_lse)
                if not lse_err < LSE_ATOL:
                    msg = f"aotk lse differs from sdpa-flash's: max abs diff {lse_err:.4g} (tolerance {LSE_ATOL})"
                    loud(f"ROW ABORTED, {gqa_label(case)}: {msg}")
                    return {}, msg, facts
                lse_txt = f", lse {lse_err:.2g}"
            note(f"aotk checked against {ref_name} on k, v expanded to {h} heads: max abs diff out {err:.2g}{lse_txt}")
            results["aotk"] = time_ms(lambda: aotk.attn_fwd(params_ref, current_stream()))
        else:
            grads = {"dq": torch.empty_like(q), "dk": torch.empty_like(k), "dv": torch.empty_like(v)}
            params.dout = describe_tensor(dout)
            for name, g in grads.items():
                setattr(params, name, describe_tensor(g))
            params.deterministic = 0  # the library's default, as the grid's "aotk" column
            aotk.attn_fwd(params_ref, current_stream())  # out and lse for the backward
            info = facts["info"] = aotk.query(AOTK_OP_ATTN_BWD, params)
            workspace = torch.empty(max(info["workspace_bytes"], 16), device=common.DEVICE, dtype=torch.uint8)
            for g in grads.values():
                g.fill_(float("nan"))
            aotk.attn_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"], current_stream())
            synchronize()
            errs = {name: rel_l2(g, ref_grads[name]) for name, g in grads.items()}
            if not all(e_ < BWD_REL_TOL for e_ in errs.values()):
                msg = f"aotk gradients differ from sdpa-flash's: relative L2 {errs} (tolerance {BWD_REL_TOL})"
                loud(f"ROW ABORTED, {gqa_label(case)}: {msg}")
                return {}, msg, facts
            note("aotk checked against sdpa-flash (autograd through k, v expanded): relative L2 "
                 + ", ".join(f"{k_} {v_:.2g}" for k_, v_ in errs.items()))
            results["aotk"] = time_ms(lambda: aotk.attn_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"],
                                                            current_stream()))
            del workspace, grads
    except AotkError as e:
        loud(f"aotk FAILED on {gqa_label(case)}: {e}")
        return results, f"aotk raised: {e}", facts
    info = facts["info"]
    note(f"aotk kernel {info['kernel_name']} (sm_{info['arch']}{', from PTX' if info['from_ptx'] else ''}, "
         f"{info['launches']} launch(es))")
    del out, lse, params, params_ref
    empty_cache()

    anchor_ms, facts["layouts"] = sdpa_anchor_times(q, k, v, causal, dout, GQA_ANCHORS)
    results.update(anchor_ms)
    if FLEX_OPTIONS["rows"]:
        block_mask = flex_block_mask(flex_causal_mask, n) if causal else None  # None: no mask
        qb, kb, vb = to_bhsd(q), to_bhsd(k), to_bhsd(v)
        ms = flex_run(qb, kb, vb, block_mask, backward, ref_out=ref,
                      ref_grads={name: g.transpose(1, 2) for name, g in ref_grads.items()},
                      dout=to_bhsd(dout) if backward else None)
        if ms is not None:
            results["flex"] = ms
            facts["layouts"]["flex"] = "enable_gqa"
        del qb, kb, vb, block_mask
    return results, None, facts


GQA_TABLE_HEAD = (f"{'op':>7} {'d':>4} {'causal':>6} {'seqlen':>6} {'batch':>5} {'heads':>6} |"
                  + "".join(f" {name:>10}" for name in GQA_IMPLS)
                  + f" | {'x flash':>7} {'x cudnn':>7} {'x flex':>7} | {'bar':>7}")


def gqa_table_line(case, tfl, failure):
    s = (f"{case['op']:>7} {case['head_dim']:>4} {('yes' if case['causal'] else 'no'):>6} {case['seqlen_q']:>6} "
         f"{case['batch']:>5} {str(case['heads_q']) + '/' + str(case['heads_kv']):>6} |")
    s += "".join(f" {tfl[name]:>10.1f}" if name in tfl else f" {'-':>10}" for name in GQA_IMPLS)
    r = {name: tfl["aotk"] / tfl[name] for name in GQA_IMPLS[1:] if name in tfl and "aotk" in tfl}
    s += " | " + " ".join(f"{r[name]:>6.2f}x" if name in r else f"{'-':>7}" for name in GQA_IMPLS[1:])
    s += f" | {gqa_verdict(r.get('sdpa-cudnn')):>7}"
    if failure:
        s += f"   FAILED: {failure}"
    return s


def gqa_verdict(ratio_cudnn):
    if ratio_cudnn is None:
        return "-"
    return "ok" if ratio_cudnn >= GQA_BAR else "LOW"


def run_gqa_op(op, quick, aotk):
    """Runs one GQA op's rows. Returns (json rows, table lines, failures, bar summary lines)."""
    rows, lines, failures, verdicts = [], [], [], []
    for case in gqa_cases(op, quick):
        print(f"\n{gqa_label(case)}", flush=True)
        ms, failure, facts = gqa_run_case(case, aotk)
        empty_cache()
        flops = gqa_flops(case)
        tfl = {impl: flops / ms[impl] / 1e9 for impl in GQA_IMPLS if impl in ms}
        for impl in GQA_IMPLS:
            if impl not in ms:
                continue
            row = {"op": op, "impl": impl, "dtype": case["dtype"], "head_dim": case["head_dim"],
                   "causal": bool(case["causal"]), "seqlen_q": case["seqlen_q"], "seqlen_k": case["seqlen_k"],
                   "batch": case["batch"], "heads_q": case["heads_q"], "heads_kv": case["heads_kv"],
                   "flops": flops, "ms": ms[impl], "tflops": round(tfl[impl], 2)}
            if impl == "aotk":
                for other in GQA_IMPLS[1:]:
                    if other in tfl:
                        row[f"ratio_to_{other.replace('sdpa-', '')}"] = round(tfl["aotk"] / tfl[other], 4)
                info = facts.get("info")
                if info is not None:
                    row["kernel"] = info["kernel_name"]
            else:
                row["gqa"] = facts.get("layouts", {}).get(impl)
            rows.append(row)
        if failure:
            failures.append(f"{gqa_label(case)}: {failure}")
        r_cudnn = tfl["aotk"] / tfl["sdpa-cudnn"] if "aotk" in tfl and "sdpa-cudnn" in tfl else None
        verdicts.append(f"  {gqa_label(case)}: "
                        + (f"{r_cudnn:.2f}x cuDNN: {gqa_verdict(r_cudnn)}" if r_cudnn else "not measured"))
        line = gqa_table_line(case, tfl, failure)
        lines.append(line)
        print(GQA_TABLE_HEAD)
        print(line, flush=True)
    bar = [f"{op}: bar (aotk >= {GQA_BAR:.1f}x sdpa-cudnn's TFLOP/s, same q, k, v, same run):"] + verdicts
    return rows, lines, failures, bar


def print_gqa_table(lines, bar_lines):
    print(f"\nGQA rows: heads {GQA_HEADS_Q} over {GQA_HEADS_KV}, d {GQA_HEAD_DIM}, bf16; TFLOP/s = 4*b*hq*s*s*d, "
          f"halved for causal (backward: 2.5x); SDPA with enable_gqa (JSON 'gqa' says if k, v were expanded "
          f"instead); flex: compiled flex_attention, causal block mask; 'x flash' / 'x cudnn' / 'x flex' = "
          f"aotk's TFLOP/s over theirs")
    print(GQA_TABLE_HEAD)
    print("-" * len(GQA_TABLE_HEAD))
    for line in lines:
        print(line)
    for line in bar_lines:
        print(line)
    sys.stdout.flush()
