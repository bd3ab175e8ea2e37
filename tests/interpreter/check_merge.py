"""attn_merge (kernels/attn_decode.py) in Triton's interpreter on the CPU, against float64: fp32 and
fp16 partials and outputs, dense and packed layouts, -inf partials holding NaN, rows with no key, NaN
lse, sinks, and in place. See check_decode.py beside it for what the interpreter does and does not
check.

    python3 tests/interpreter/check_merge.py
"""
import os, sys, math; os.environ["TRITON_INTERPRET"]="1"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels"))
import torch, attn_decode as K
d32 = torch.zeros(1); 
def merge(parts, lparts, out, lse, sinks=None, packed=False, whole_rows=False):
    P = parts.shape[0]
    if packed:
        _, T, H, D = parts.shape; B, S = 1, T
        ps = (parts.stride(0), 0, parts.stride(1), parts.stride(2)); ls = (lparts.stride(0), 0, lparts.stride(1), lparts.stride(2))
        os_ = (0, out.stride(0), out.stride(1)); lo = (0, lse.stride(0), lse.stride(1)) if lse is not None else (0,0,0)
    else:
        _, B, S, H, D = parts.shape
        ps = parts.stride()[:4]; ls = lparts.stride(); os_ = out.stride()[:3]; lo = lse.stride() if lse is not None else (0,0,0)
    slot = lambda t, dt: t if t.dtype == dt else d32.to(dt)
    flags = {torch.float16: 1024, torch.bfloat16: 2048, torch.float32: 0}[parts.dtype] | {torch.float16: 4096, torch.bfloat16: 8192, torch.float32: 0}[out.dtype] | (1 if lse is not None else 0) | (32 if sinks is not None else 0)
    rows = B * S * H
    # One program per 16 rows and 64 columns, or (in place, FLAG_WHOLE_ROWS) per 16 rows.
    flags |= 16384 if whole_rows else 0
    K.attn_merge[(-(-rows // 16) * (1 if whole_rows else -(-D // 64)),)](slot(parts, torch.float32), slot(parts, torch.float16), slot(parts, torch.bfloat16), lparts,
        slot(out, torch.float32), slot(out, torch.float16), slot(out, torch.bfloat16), lse if lse is not None else d32, sinks if sinks is not None else d32,
        *ps, *ls, *os_, *lo, P, S, H, rows, D // 8, flags, BLOCK_M=16, BLOCK_N=64)
def ref(parts, lparts, sinks=None, packed=False):
    p = parts.double(); l = lparts.double()
    if packed: l = l.permute(0, 2, 1)  # [P, T, H]
    else: l = l.permute(0, 1, 3, 2)  # [P, B, S, H]
    if sinks is not None:
        sh = list(l.shape); sh[0] = 1
        l = torch.cat([l, sinks.double().expand(sh)], 0); p = torch.cat([p, torch.zeros_like(p[:1])], 0)
    m = l.max(0).values; ms = torch.where(torch.isinf(m), 0, m)
    w = torch.exp(l - ms); tot = w.sum(0)
    o = (torch.where(w[..., None] > 0, p * w[..., None], 0)).sum(0) / torch.where(tot > 0, tot, 1)[..., None]
    lse = torch.where(tot > 0, ms + torch.log(tot), -math.inf)
    return o, lse
torch.manual_seed(0)
ok = True
for pdt, odt, P, D, packed in ((torch.float32, torch.float16, 3, 64, False), (torch.float16, torch.float32, 2, 40, False), (torch.float32, torch.float32, 5, 128, True), (torch.float16, torch.float16, 1, 72, True)):
    B, S, H = 2, 3, 5
    if packed:
        parts = torch.randn(P, S * 2, H, D).to(pdt); lparts = torch.randn(P, H, S * 2) * 3
        out = torch.full((S * 2, H, D), float("nan")).to(odt); lse = torch.full((H, S * 2), float("nan"))
    else:
        parts = torch.randn(P, B, S, H, D).to(pdt); lparts = torch.randn(P, B, H, S) * 3
        out = torch.full((B, S, H, D), float("nan")).to(odt); lse = torch.full((B, H, S), float("nan"))
    # a -inf partial with NaN out, an all -inf row, a NaN lse row
    lparts.view(P, -1)[0, 0] = -math.inf; parts.view(P, -1)[0, :D] = float("nan") if P > 1 else parts.view(P,-1)[0,:D]
    lparts.view(P, -1)[:, 1] = -math.inf
    sinks = torch.randn(H) if P == 2 else None
    merge(parts, lparts, out, lse, sinks, packed)
    ro, rl = ref(parts, lparts, sinks, packed)
    eo = (out.double() - ro).abs().nan_to_num(0).max().item(); nan_mismatch = (out.isnan() != ro.isnan()).sum().item()
    if packed: rl2 = rl.T
    else: rl2 = rl.permute(0, 2, 1)
    el = (lse.double() - rl2).abs(); el = torch.where(lse.double() == rl2, 0, el).nan_to_num(0).max().item()
    good = eo < 1e-2 and el < 1e-5 and nan_mismatch == 0
    ok &= good
    print("ok" if good else "FAIL", pdt, odt, P, D, packed, eo, el, nan_mismatch)
# NaN lse and in place
parts = torch.randn(2, 1, 2, 3, 64); lparts = torch.randn(2, 1, 3, 2); lparts[1, 0, 1, 0] = float("nan")
ro, rl = ref(parts.clone(), lparts.clone())
merge(parts, lparts, parts[0], lparts[0], whole_rows=True)
inplace_err = (parts[0].double() - ro).abs().nan_to_num(0).max().item()
nan_row = parts[0][0, 0, 1].isnan().all().item() and math.isnan(lparts[0][0, 1, 0].item())
ok &= inplace_err < 1e-5 and nan_row
print("ok" if inplace_err < 1e-5 and nan_row else "FAIL", "in place, err", inplace_err, "NaN lse row NaN:", nan_row)
print("all ok" if ok else "SOME FAIL")
sys.exit(0 if ok else 1)
