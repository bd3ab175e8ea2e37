"""The varlen document ops "fwd_varlen" and "bwd_varlen": packed documents (issue 11's varlen bar)."""
import ctypes
import sys
import traceback

from . import common
from .common import (AOTK_OP_ATTN_BWD, AOTK_OP_ATTN_FWD, F, HIDDEN, AotkError, _sdpa_backend, current_stream,
                     describe_tensor, empty_cache, fwd_params, loud, note, sdpa_kernel, synchronize, time_ms, torch)
from .features import (BWD_ERR_FACTOR, FWD_ERR_FACTOR, LSE_FLOOR, bf16_rounding_floor, compare_to_reference,
                       feature_params, feature_spec, feature_tensors, reference_dense)
from .flex import FLEX_OPTIONS, flex_block_mask, flex_document_mask, flex_run, to_bhsd

# ---------------------------------------------------------------------------------------------------
# ops "fwd_varlen" and "bwd_varlen": packed documents (issue 11's varlen bar)
# ---------------------------------------------------------------------------------------------------
#
# 16 documents of 512 tokens, and (another row) 16 of 1024, packed into one sequence: aotk's varlen layout
# q, k, v [16 L, heads, d] with cu_seqlens 0, L, 2L, ..., 16L; bf16; d 128 with 16 heads, d 64 with 32
# (heads = 2048 / d, as the grid); causal (within each document) and not. Each row times, on the same
# tensors:
#   aotk        aotk_attn_fwd / _bwd in the varlen layout;
#   aotk-plain  aotk's plain dense kernel on the same memory viewed as a batch of 16 sequences of L
#               ([16, L, heads, d]: the same work, since the documents have equal lengths);
#   sdpa-flash, sdpa-cudnn   SDPA on that dense batch (SDPA's own varlen path, nested tensors, is not timed);
#   flex        FlexAttention on the packed [1, heads, 16 L, d] with a document block mask from the
#               document ids (causal within the document where causal).
# FLOPs count only the pairs computed, the grid's way: 4 * 16 * heads * L * L * d, halved for causal
# (2.5x for the backward), the same count for every implementation. The bars: aotk (varlen) at least 0.8x
# the TFLOP/s of aotk-plain, and faster than flex.
# Checks, before anything of the row is timed: aotk's varlen and dense outputs (out, lse; backward: dq, dk,
# dv), NaN-poisoned first, against the feature rows' float32 reference (explicit masks, one document at a
# time, at the row's full size) within their bound (2x, backward 3x, the error of the same reference in
# bf16, plus the rounding floor).

DOC_OPS = ("fwd_varlen", "bwd_varlen")
DOC_COUNT = 16
DOC_LENS = [512, 1024]
DOC_HEAD_DIMS = [128, 64]
DOC_PLAIN_BAR = 0.8  # aotk varlen TFLOP/s over aotk-plain's
DOC_FLEX_BAR = 1.0   # aotk varlen over flex: faster (strictly)
DOC_REF_CHUNK = 4    # documents per reference call (the float32 scores of 4 documents: 4 x 32 x 1024^2 x 4 B)
DOC_ANCHORS = [("sdpa-flash", _sdpa_backend("FLASH_ATTENTION")), ("sdpa-cudnn", _sdpa_backend("CUDNN_ATTENTION"))]
DOC_IMPLS = ["aotk", "aotk-plain"] + [name for name, _ in DOC_ANCHORS] + ["flex"]
DOC_LAYOUTS = {"aotk": "varlen", "aotk-plain": "dense batch", "sdpa-flash": "dense batch",
               "sdpa-cudnn": "dense batch", "flex": "packed, document block mask"}


def doc_spec(op, doc_len, head_dim, causal, docs=DOC_COUNT, heads=None):
    """A row, as a feature-row spec (so feature_tensors and feature_params build its varlen tensors)."""
    return feature_spec(op, docs * doc_len, head_dim, head_dim, f"docs-{docs}x{doc_len}",
                        heads_q=heads or max(1, HIDDEN // head_dim), heads_kv=heads or max(1, HIDDEN // head_dim),
                        batch=docs, seqlen_q=doc_len, seqlen_k=doc_len, seqlens_q=[doc_len] * docs,
                        seqlens_k=[doc_len] * docs, causal=causal, docs=docs, doc_len=doc_len)


def doc_cases(op, quick=False):
    """The rows of one varlen-documents op (--quick runs the same: 8 rows)."""
    for doc_len in DOC_LENS:
        for d in DOC_HEAD_DIMS:
            for causal in (False, True):
                yield doc_spec(op, doc_len, d, causal)


def doc_label(spec):
    return (f"{spec['op']} bf16 d={spec['head_dim_qk']} heads={spec['heads_q']} {spec['docs']} documents of "
            f"{spec['doc_len']} packed ({spec['docs'] * spec['doc_len']} tokens)" + (" causal" if spec["causal"] else ""))


def doc_flops(spec):
    f = 4.0 * spec["docs"] * spec["heads_q"] * spec["doc_len"] * spec["doc_len"] * spec["head_dim_qk"]
    f = f / 2 if spec["causal"] else f
    return 2.5 * f if spec["op"] == "bwd_varlen" else f


def doc_dense(spec, x):
    """The [docs, L, ...] view of a packed [docs * L, ...] tensor (no copy)."""
    return x.view(spec["docs"], spec["doc_len"], *x.shape[1:])


def doc_to_bhsd(x):
    """[docs, L, h, d] as the packed [1, h, docs * L, d] that flex computes (a view)."""
    return x.reshape(1, -1, *x.shape[2:]).transpose(1, 2)


def doc_lse_dense(spec, lse):
    """The varlen lse [heads, docs * L] as [docs, heads, L] (a view)."""
    return lse.view(lse.shape[0], spec["docs"], spec["doc_len"]).transpose(0, 1)


def doc_reference(spec, t, compute_dtype, dout=None):
    """The feature rows' reference (reference_dense, explicit masks) on the documents as a dense batch,
    DOC_REF_CHUNK documents at a time: (out [docs, L, h, d] fp32, lse [docs, h, L] fp32, grads) where grads
    is None, or with dout (packed, like out) {"dq", "dk", "dv"} in [docs, L, h, d] through autograd."""
    q, k, v = (doc_dense(spec, t[n].detach()) for n in ("q", "k", "v"))
    outs, lses, grads = [], [], {"dq": [], "dk": [], "dv": []}
    for i in range(0, spec["docs"], DOC_REF_CHUNK):
        chunk = [x[i:i + DOC_REF_CHUNK] for x in (q, k, v)]
        if dout is None:
            with torch.no_grad():
                o, l = reference_dense(*chunk, spec, None, None, None, compute_dtype)
            outs.append(o)
            lses.append(l)
        else:
            leaves = [x.to(compute_dtype, copy=True).requires_grad_(True) for x in chunk]
            o, l = reference_dense(*leaves, spec, None, None, None, compute_dtype)
            g = torch.autograd.grad(o, leaves, doc_dense(spec, dout)[i:i + DOC_REF_CHUNK].float())
            for name, gi in zip(("dq", "dk", "dv"), g):
                grads[name].append(gi.float())
            outs.append(o.detach())
            lses.append(l.detach())
    return torch.cat(outs), torch.cat(lses), ({n: torch.cat(g) for n, g in grads.items()} if dout is not None else None)


def doc_plain_tensors(spec, t):
    """aotk-plain's tensors: the row's q, k, v (and dout) viewed as [docs, L, h, d], its own outputs."""
    p = {n: doc_dense(spec, t[n].detach()) for n in ("q", "k", "v")}
    p["out"] = torch.empty_like(p["q"])
    p["lse"] = torch.empty(spec["docs"], spec["heads_q"], spec["doc_len"], device=common.DEVICE, dtype=torch.float32)
    if "dout" in t:
        p["dout"] = doc_dense(spec, t["dout"])
    return p


def attach_backward(params, t):
    """Adds dout and fresh dq, dk, dv (t["dq"] ...) to a forward's params, with the library's default
    deterministic = 0 as the grid's "aotk" column (varlen and padded batches run deterministic kernels
    either way today)."""
    for name in ("q", "k", "v"):
        t["d" + name] = torch.empty_like(t[name])
    for name in ("dout", "dq", "dk", "dv"):
        setattr(params, name, describe_tensor(t[name]))
    params.deterministic = 0


def aotk_backward_call(aotk, params):
    """(callable running aotk_attn_bwd with its workspace, kernel info)."""
    info = aotk.query(AOTK_OP_ATTN_BWD, params)
    workspace = torch.empty(max(info["workspace_bytes"], 16), device=common.DEVICE, dtype=torch.uint8)
    params_ref = ctypes.byref(params)
    return (lambda: aotk.attn_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"], current_stream())), info


def doc_check(spec, aotk, backward, t, plain):
    """Runs aotk in the varlen layout (t, from feature_tensors) and the plain kernel (plain, from
    doc_plain_tensors) with NaN-poisoned outputs, and compares out and lse (backward: dq, dk, dv) of both
    with doc_reference. Leaves the params in t["params"] and plain["params"] (forward done, backward fields
    attached for the backward) and the float32 reference in t["ref"] ({"out"}, or {"dq", "dk", "dv"}; [docs, L,
    h, d]). Returns (failure or None, summary, {"aotk": info, "aotk-plain": info})."""
    t["params"] = feature_params(spec, t)
    plain["params"] = fwd_params(plain["q"], plain["k"], plain["v"], plain["out"], plain["lse"], spec["causal"])
    infos = {}
    if backward:
        dout = t["dout"]
        ref32 = doc_reference(spec, t, torch.float32, dout)[2]
        ref16 = doc_reference(spec, t, torch.bfloat16, dout)[2]
        t["ref"] = ref32
    else:
        out32, lse32, _ = doc_reference(spec, t, torch.float32)
        out16, lse16, _ = doc_reference(spec, t, torch.bfloat16)
        t["ref"] = {"out": out32}
    texts, bad = [], []
    for impl, x in (("aotk", t), ("aotk-plain", plain)):
        params = x["params"]
        x["out"].fill_(float("nan"))
        x["lse"].fill_(float("nan"))
        aotk.attn_fwd(ctypes.byref(params), current_stream())
        if not backward:
            infos[impl] = aotk.query(AOTK_OP_ATTN_FWD, params)
            synchronize()
            out = doc_dense(spec, x["out"]) if impl == "aotk" else x["out"]
            lse = doc_lse_dense(spec, x["lse"]) if impl == "aotk" else x["lse"]
            results = [compare_to_reference("out", out, out32, out16, FWD_ERR_FACTOR, bf16_rounding_floor(out32)),
                       compare_to_reference("lse", lse, lse32, lse16, FWD_ERR_FACTOR, LSE_FLOOR)]
        else:
            attach_backward(params, x)
            for name in ("dq", "dk", "dv"):
                x[name].fill_(float("nan"))
            run, infos[impl] = aotk_backward_call(aotk, params)
            x["bwd"] = run
            run()
            synchronize()
            results = []
            for name in ("dq", "dk", "dv"):
                got = doc_dense(spec, x[name]) if impl == "aotk" else x[name]
                results.append(compare_to_reference(name, got, ref32[name], ref16[name], BWD_ERR_FACTOR,
                                                    bf16_rounding_floor(ref32[name])))
        texts.append(f"{impl}: " + ", ".join(text for _, text in results))
        bad += [f"{impl} {text}" for ok, text in results if not ok]
    summary = "checked against the float32 reference: " + "; ".join(texts)
    if bad:
        return "aotk differs from the float32 reference: " + ", ".join(bad), summary, infos
    return None, summary, infos


def doc_anchor_times(spec, plain, backward):
    """{impl: ms} of SDPA's flash and cuDNN backends on the dense batch (views of the row's tensors)."""
    results = {}
    dout_t = plain["dout"].transpose(1, 2) if backward else None
    for name, be in DOC_ANCHORS:
        try:
            leaves = [plain[n].detach().requires_grad_(backward) for n in ("q", "k", "v")]
            qt, kt, vt = (y.transpose(1, 2) for y in leaves)
            with sdpa_kernel(be):
                if not backward:
                    with torch.no_grad():
                        results[name] = time_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt,
                                                                                       is_causal=spec["causal"]))
                else:
                    o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=spec["causal"])
                    results[name] = time_ms(lambda: torch.autograd.grad(o, leaves, dout_t, retain_graph=True))
                    del o
        except Exception as e:  # noqa: BLE001
            note(f"{name} skipped (unsupported here?): {type(e).__name__}: {str(e)[:200]}")
        finally:
            leaves = qt = kt = vt = None
            empty_cache()
    return results


def doc_run_case(spec, aotk):
    """doc_run_case_unguarded, with any exception turned into the row's failure."""
    try:
        return doc_run_case_unguarded(spec, aotk)
    except Exception as e:  # noqa: BLE001
        loud(f"ROW ABORTED, {doc_label(spec)}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return {}, f"{type(e).__name__}: {str(e)[:300]}", {}


def doc_run_case_unguarded(spec, aotk):
    """Checks aotk (varlen and plain), times both, then the SDPA anchors and flex on the same tensors.
    Returns ({impl: ms}, failure or None, {impl: aotk kernel info})."""
    backward = spec["op"] == "bwd_varlen"
    t = feature_tensors(spec)
    if backward:
        t["dout"] = torch.randn_like(t["out"])
    plain = doc_plain_tensors(spec, t)
    try:
        failure, summary, infos = doc_check(spec, aotk, backward, t, plain)
    except AotkError as e:
        loud(f"aotk FAILED on {doc_label(spec)}: {e}")
        return {}, f"aotk raised in the check: {e}", {}
    if failure:
        loud(f"ROW ABORTED, {doc_label(spec)}: {failure}")
        return {}, failure, infos
    note(summary)
    for impl, info in infos.items():
        note(f"{impl} kernel {info['kernel_name']} ({info['launches']} launch(es), features: "
             f"{', '.join(info['features']) or 'none'})")
    empty_cache()

    results = {}
    for impl, x in (("aotk", t), ("aotk-plain", plain)):
        try:
            if backward:  # out and lse: the forward's, from the check
                results[impl] = time_ms(x["bwd"])
            else:
                params_ref = ctypes.byref(x["params"])
                results[impl] = time_ms(lambda: aotk.attn_fwd(params_ref, current_stream()))
        except AotkError as e:
            loud(f"aotk FAILED while timing {doc_label(spec)} ({impl}): {e}")
            return results, f"aotk raised while timing ({impl}): {e}", infos
    results.update(doc_anchor_times(spec, plain, backward))

    if FLEX_OPTIONS["rows"]:
        tokens = spec["docs"] * spec["doc_len"]
        doc_ids = torch.arange(tokens, device=common.DEVICE, dtype=torch.int32) // spec["doc_len"]
        block_mask = flex_block_mask(flex_document_mask(doc_ids, spec["causal"]), tokens)
        qb, kb, vb = (to_bhsd(t[n]) for n in ("q", "k", "v"))
        ref = {n: doc_to_bhsd(x) for n, x in t.pop("ref").items()}  # the float32 reference of the check
        ref_out = ref.get("out")
        ref_grads = None if not backward else ref
        ms = flex_run(qb, kb, vb, block_mask, backward, ref_out=ref_out, ref_grads=ref_grads,
                      dout=to_bhsd(t["dout"]) if backward else None)
        if ms is not None:
            results["flex"] = ms
        del qb, kb, vb, block_mask, ref, ref_out, ref_grads
    del t, plain
    return results, None, infos


DOC_TABLE_HEAD = (f"{'op':>10} {'d':>4} {'heads':>5} {'causal':>6} {'docs':>8} |"
                  + "".join(f" {name:>10}" for name in DOC_IMPLS)
                  + f" | {'x plain':>7} {'x flex':>7} {'x cudnn':>7} | {'bar':>7}")


def doc_ratios(tfl):
    """aotk (varlen) over aotk-plain, flex and sdpa-cudnn (None where missing)."""
    return {other: tfl["aotk"] / tfl[other] if "aotk" in tfl and other in tfl else None
            for other in ("aotk-plain", "flex", "sdpa-cudnn", "sdpa-flash")}


def doc_verdict(r):
    """'ok' when aotk is >= DOC_PLAIN_BAR x plain and faster than flex, 'LOW' when either fails, '-' when
    either is not measured."""
    if r["aotk-plain"] is None or r["flex"] is None:
        return "-"
    return "ok" if r["aotk-plain"] >= DOC_PLAIN_BAR and r["flex"] > DOC_FLEX_BAR else "LOW"


def doc_table_line(spec, tfl, failure):
    s = (f"{spec['op']:>10} {spec['head_dim_qk']:>4} {spec['heads_q']:>5} {('yes' if spec['causal'] else 'no'):>6} "
         f"{str(spec['docs']) + 'x' + str(spec['doc_len']):>8} |")
    s += "".join(f" {tfl[name]:>10.1f}" if name in tfl else f" {'-':>10}" for name in DOC_IMPLS)
    r = doc_ratios(tfl)
    s += " | " + " ".join(f"{r[name]:>6.2f}x" if r[name] else f"{'-':>7}" for name in ("aotk-plain", "flex", "sdpa-cudnn"))
    s += f" | {doc_verdict(r):>7}"
    if failure:
        s += f"   FAILED: {failure}"
    return s


def run_doc_op(op, quick, aotk):
    """Runs one varlen-documents op's rows. Returns (json rows, table lines, failures, bar summary lines)."""
    rows, lines, failures, verdicts = [], [], [], []
    for spec in doc_cases(op, quick):
        print(f"\n{doc_label(spec)}", flush=True)
        ms, failure, infos = doc_run_case(spec, aotk)
        empty_cache()
        flops = doc_flops(spec)
        tfl = {impl: flops / ms[impl] / 1e9 for impl in DOC_IMPLS if impl in ms}
        r = doc_ratios(tfl)
        for impl in DOC_IMPLS:
            if impl not in ms:
                continue
            row = {"op": op, "impl": impl, "dtype": "bf16", "head_dim": spec["head_dim_qk"],
                   "causal": bool(spec["causal"]), "seqlen_q": spec["doc_len"], "seqlen_k": spec["doc_len"],
                   "batch": spec["docs"], "heads_q": spec["heads_q"], "heads_kv": spec["heads_kv"],
                   "docs": spec["docs"], "doc_len": spec["doc_len"], "tokens": spec["docs"] * spec["doc_len"],
                   "layout": DOC_LAYOUTS[impl], "flops": flops, "ms": ms[impl], "tflops": round(tfl[impl], 2)}
            if impl == "aotk":
                for other, value in r.items():
                    if value is not None:
                        row["ratio_to_" + other.replace("sdpa-", "").replace("aotk-", "")] = round(value, 4)
            if impl in infos:
                row["kernel"] = infos[impl]["kernel_name"]
                row["kernel_features"] = infos[impl]["features"]
            rows.append(row)
        if failure:
            failures.append(f"{doc_label(spec)}: {failure}")
        v = doc_verdict(r)
        got = ", ".join(f"{r[o]:.2f}x {o}" for o in ("aotk-plain", "flex") if r[o] is not None) or "not measured"
        verdicts.append(f"  {doc_label(spec)}: {got}: {v}")
        line = doc_table_line(spec, tfl, failure)
        lines.append(line)
        print(DOC_TABLE_HEAD)
        print(line, flush=True)
    bar = [f"{op}: bars (aotk varlen >= {DOC_PLAIN_BAR:.1f}x aotk-plain's TFLOP/s, and faster than flex's "
           f"document mask; same tensors, same run): {sum(1 for x in verdicts if x.endswith(': ok'))} of "
           f"{len(verdicts)} pass"] + verdicts
    return rows, lines, failures, bar


def print_doc_table(lines, bar_lines):
    print(f"\nVarlen document rows: {DOC_COUNT} documents of L tokens packed (cu_seqlens), bf16; TFLOP/s = "
          f"4*docs*h*L*L*d, halved for causal (backward: 2.5x), the same count for every column; aotk = varlen "
          f"layout; aotk-plain and sdpa-* = the same memory as a dense batch [{DOC_COUNT}, L]; flex = packed "
          f"with a document block mask; 'x plain' / 'x flex' / 'x cudnn' = aotk's TFLOP/s over theirs")
    print(DOC_TABLE_HEAD)
    print("-" * len(DOC_TABLE_HEAD))
    for line in lines:
        print(line)
    for line in bar_lines:
        print(line)
    sys.stdout.flush()
