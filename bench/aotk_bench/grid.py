"""The grid ops "fwd" and "bwd": aotk_attn_fwd and aotk_attn_bwd against SDPA's backends on the standard grid."""
import ctypes

from .common import (AOTK_OP_ATTN_BWD, AOTK_OP_ATTN_FWD, BWD_REL_TOL, F, GRID_DTYPES, HEAD_DIMS, HIDDEN, LSE_ATOL,
                     OUT_ATOL, SDPA_BACKENDS, SEQLENS, SEQLENS_QUICK, TOTAL_TOKENS, AotkError, _sdpa_backend,
                     case_label, current_stream, describe_tensor, fwd_params, loud, max_abs_diff, note, rel_l2,
                     sdpa_kernel, time_ms, torch)
from .flex import FLEX_OPTIONS, flex_block_mask, flex_causal_mask, flex_run, to_bhsd

# ---------------------------------------------------------------------------------------------------
# op "fwd"
# ---------------------------------------------------------------------------------------------------

# Head dim 192 in the grid is DeepSeek's pair: q and k 192, v 128.
GRID_HEAD_DIM_V = {192: 128}


def fwd_flops(case):
    # 2 x (head_dim_qk + head_dim_v) per score pair: S = Q K^T and O = P V.
    d, dv = case["head_dim"], case.get("head_dim_v", case["head_dim"])
    f = 2.0 * case["batch"] * case["heads_q"] * case["seqlen_q"] * case["seqlen_k"] * (d + dv)
    return f / 2 if case["causal"] else f


def fwd_cases(quick):
    seqlens = SEQLENS_QUICK if quick else SEQLENS
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    for dtype in (dtypes[name] for name in GRID_DTYPES):
        for d in HEAD_DIMS:
            for causal in (False, True):
                for n in seqlens:
                    h = HIDDEN // d
                    yield {"op": "fwd", "dtype": dtype, "head_dim": d, "head_dim_v": GRID_HEAD_DIM_V.get(d, d),
                           "causal": causal, "seqlen_q": n, "seqlen_k": n, "batch": TOTAL_TOKENS // n, "heads_q": h,
                           "heads_kv": h}


def fwd_reference(qt, kt, vt, causal):
    """(out [b, h, s, d], lse [b, h, s] or None, name) from the first SDPA backend that runs."""
    for name, be in SDPA_BACKENDS:
        try:
            with sdpa_kernel(be):
                ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        except Exception as e:  # noqa: BLE001
            note(f"{name} unavailable as reference: {type(e).__name__}: {str(e)[:200]}")
            continue
        lse = None
        if name == "sdpa-flash":
            try:  # the op SDPA's flash backend runs; it also returns the fp32 natural-log lse [b, h, s]
                res = torch.ops.aten._scaled_dot_product_flash_attention(qt, kt, vt, 0.0, causal)
                lse = res[1]
                if tuple(lse.shape) != tuple(qt.shape[:3]):
                    note(f"flash lse has shape {tuple(lse.shape)}; lse not checked")
                    lse = None
            except Exception as e:  # noqa: BLE001
                note(f"could not get flash's lse ({type(e).__name__}); lse not checked")
        return ref, lse, name
    return None, None, None


def fwd_run_case(case, aotk):
    """Times every impl on one case. Returns ({impl: ms}, failure message or None)."""
    b, n, h, d, causal = case["batch"], case["seqlen_q"], case["heads_q"], case["head_dim"], case["causal"]
    dtype, dv = case["dtype"], case["head_dim_v"]
    q = torch.randn(b, n, h, d, device="cuda", dtype=dtype)
    k = torch.randn(b, case["seqlen_k"], case["heads_kv"], d, device="cuda", dtype=dtype)
    v = torch.randn(b, case["seqlen_k"], case["heads_kv"], dv, device="cuda", dtype=dtype)
    out = torch.empty(b, n, h, dv, device="cuda", dtype=dtype)
    lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # [b, h, s, d] views for SDPA, no copies
    results = {}

    # Correctness first: aotk against SDPA (flash's output, or the first backend that runs).
    ref, ref_lse, ref_name = fwd_reference(qt, kt, vt, causal)
    if ref is None:
        return results, "no SDPA backend ran, so aotk could not be checked"
    params = fwd_params(q, k, v, out, lse, causal)
    params_ref = ctypes.byref(params)
    try:
        info = aotk.query(AOTK_OP_ATTN_FWD, params)
        note(f"aotk kernel {info['kernel_name']} (sm_{info['arch']}{', from PTX' if info['from_ptx'] else ''})")
    except AotkError as e:
        note(str(e))
    aotk_ok = True
    try:
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        aotk.attn_fwd(params_ref, current_stream())
        torch.cuda.synchronize()
    except AotkError as e:
        loud(f"aotk FAILED on {case_label(case)}: {e}")
        aotk_ok = False
        failure = f"aotk raised: {e}"
    if aotk_ok:
        err = max_abs_diff(out, ref.transpose(1, 2))
        tol = OUT_ATOL[dtype]
        if not err < tol:
            msg = f"aotk out differs from {ref_name}: max abs diff {err:.4g} (tolerance {tol})"
            loud(f"ROW ABORTED, {case_label(case)}: {msg}")
            return {}, msg
        lse_err = None
        if ref_lse is not None:
            lse_err = max_abs_diff(lse, ref_lse)
            if not lse_err < LSE_ATOL:
                msg = f"aotk lse differs from sdpa-flash's: max abs diff {lse_err:.4g} (tolerance {LSE_ATOL})"
                loud(f"ROW ABORTED, {case_label(case)}: {msg}")
                return {}, msg
        lse_txt = f", lse {lse_err:.2g}" if lse_err is not None else ""
        note(f"aotk checked against {ref_name}: max abs diff out {err:.2g}{lse_txt}")
        failure = None
    if FLEX_OPTIONS["grid"]:  # --flex: compiled FlexAttention on contiguous [b, h, s, d] copies
        ms = flex_run(to_bhsd(q), to_bhsd(k), to_bhsd(v), flex_block_mask(flex_causal_mask, n) if causal else None,
                      False, ref_out=ref)
        if ms is not None:
            results["flex"] = ms
    del ref, ref_lse

    if aotk_ok:
        try:
            results["aotk"] = time_ms(lambda: aotk.attn_fwd(params_ref, current_stream()))
        except AotkError as e:
            loud(f"aotk FAILED while timing {case_label(case)}: {e}")
            failure = f"aotk raised while timing: {e}"

    for name, be in SDPA_BACKENDS:
        try:
            with sdpa_kernel(be):
                results[name] = time_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
        except Exception as e:  # noqa: BLE001
            note(f"{name} skipped (unsupported here?): {type(e).__name__}: {str(e)[:200]}")
    del q, k, v, out, lse, qt, kt, vt, params
    return results, failure


# ---------------------------------------------------------------------------------------------------
# op "bwd": aotk_attn_bwd against the backward of SDPA's flash and cuDNN backends
# ---------------------------------------------------------------------------------------------------

BWD_BACKENDS = [("sdpa-flash", _sdpa_backend("FLASH_ATTENTION")), ("sdpa-cudnn", _sdpa_backend("CUDNN_ATTENTION"))]


def bwd_flops(case):
    return 2.5 * fwd_flops(case)  # anchors.md: backward = 2.5 x forward


def bwd_cases(quick):
    for case in fwd_cases(quick):
        yield dict(case, op="bwd")


def bwd_run_case(case, aotk):
    """Times the backward alone (the forward's out and lse already computed) for every impl."""
    b, n, h, d, causal = case["batch"], case["seqlen_q"], case["heads_q"], case["head_dim"], case["causal"]
    dtype, dv = case["dtype"], case["head_dim_v"]
    q = torch.randn(b, n, h, d, device="cuda", dtype=dtype, requires_grad=True)
    k = torch.randn(b, case["seqlen_k"], case["heads_kv"], d, device="cuda", dtype=dtype, requires_grad=True)
    v = torch.randn(b, case["seqlen_k"], case["heads_kv"], dv, device="cuda", dtype=dtype, requires_grad=True)
    dout = torch.randn(b, n, h, dv, device="cuda", dtype=dtype)
    results = {}
    ref_grads, ref_name = {}, None
    for name, be in BWD_BACKENDS:
        try:
            with sdpa_kernel(be):
                o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                   is_causal=causal)
                g = dout.transpose(1, 2)
                # The reference: flash's gradients, or cuDNN's where flash does not run (head dims (192, 128)).
                if not ref_grads:
                    ref_grads = dict(zip(("dq", "dk", "dv"), torch.autograd.grad(o, (q, k, v), g, retain_graph=True)))
                    ref_name = name
                results[name] = time_ms(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
                del o
        except Exception as e:  # noqa: BLE001
            note(f"{name} backward skipped (unsupported here?): {type(e).__name__}: {str(e)[:200]}")
    if not ref_grads:
        return results, "no SDPA backward ran, so aotk's could not be checked"

    with torch.no_grad():
        out = torch.empty_like(dout)
        lse = torch.empty(b, h, n, device="cuda", dtype=torch.float32)
        dq, dk, dv_ = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        params = fwd_params(q.detach(), k.detach(), v.detach(), out, lse, causal)
        for field, t in (("dout", dout), ("dq", dq), ("dk", dk), ("dv", dv_)):
            setattr(params, field, describe_tensor(t))
        params_ref = ctypes.byref(params)
        failure = None
        try:
            aotk.attn_fwd(params_ref, current_stream())
        except AotkError as e:
            loud(f"aotk FAILED on {case_label(case)}: {e}")
            return results, f"aotk raised: {e}"
        # Both modes, each checked and timed: the default (deterministic = 0) and the deterministic one.
        for impl, deterministic in (("aotk", 0), ("aotk-det", 1)):
            params.deterministic = deterministic
            try:
                info = aotk.query(AOTK_OP_ATTN_BWD, params)
                note(f"{impl}: {info['kernel_name']} ({info['launches']} kernels, features "
                     f"{', '.join(info['features']) or 'none'}), workspace {info['workspace_bytes']} bytes")
                workspace = torch.empty(max(info["workspace_bytes"], 16), device="cuda", dtype=torch.uint8)
                for t in (dq, dk, dv_):
                    t.fill_(float("nan"))
                aotk.attn_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"], current_stream())
                torch.cuda.synchronize()
            except AotkError as e:
                loud(f"{impl} FAILED on {case_label(case)}: {e}")
                return results, f"{impl} raised: {e}"
            errs = {name: rel_l2(t, ref_grads[name]) for name, t in (("dq", dq), ("dk", dk), ("dv", dv_))}
            if not all(e_ < BWD_REL_TOL for e_ in errs.values()):
                msg = f"{impl} gradients differ from {ref_name}'s: relative L2 {errs} (tolerance {BWD_REL_TOL})"
                loud(f"ROW ABORTED, {case_label(case)}: {msg}")
                return {}, msg
            note(f"{impl} checked against {ref_name}: relative L2 "
                 + ", ".join(f"{k_} {v_:.2g}" for k_, v_ in errs.items()))
            try:
                results[impl] = time_ms(lambda: aotk.attn_bwd(params_ref, workspace.data_ptr(),
                                                              info["workspace_bytes"], current_stream()))
            except AotkError as e:
                failure = f"{impl} raised while timing: {e}"
            del workspace
    if FLEX_OPTIONS["grid"]:  # --flex: compiled FlexAttention's backward, checked against flash's gradients
        ms = flex_run(to_bhsd(q), to_bhsd(k), to_bhsd(v), flex_block_mask(flex_causal_mask, n) if causal else None,
                      True, ref_grads={name: g.transpose(1, 2) for name, g in ref_grads.items()}, dout=to_bhsd(dout))
        if ms is not None:
            results["flex"] = ms
    del q, k, v, dout, out, lse, dq, dk, dv_, params, ref_grads
    return results, failure
