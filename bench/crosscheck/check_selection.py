"""A cross-check of aotk's selection attention against torch autograd, on the GPU machine.

    python3 bench/crosscheck/check_selection.py --lib path/to/libaotk.so

Independent of the C test suite (which checks against aotk's own float64 reference): the reference is
dense float32 attention with a mask built from the block indices by torch ops (each valid slot
unmasks its block's keys up to the token's causal position), and its gradients come from
torch.autograd. Prints one line per case with the max error of out, lse, dq, dk, dv relative to the
largest reference value, and exits non-zero if any exceeds the tolerance.
"""
import argparse
import ctypes
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import aotk_bench.common as ba  # noqa: E402  (the ctypes declarations of include/aotk.h)


def random_indices(len_q, len_k, heads_kv, slots, block_size, generator, device, junk=True):
    """Distinct random causal blocks per (token, head) in random slot order, -1 in the rest; with junk,
    some slots hold out-of-range or after-the-diagonal ids, which the contract ignores."""
    num_blocks = max(1, -(-len_k // block_size))
    position = torch.arange(len_q, device=device) + len_k - len_q
    available = (position // block_size + 1).clamp(min=0, max=num_blocks)  # blocks 0 .. available-1
    keys = torch.rand(len_q, heads_kv, num_blocks, generator=generator, device=device)
    keys = keys.masked_fill(torch.arange(num_blocks, device=device)[None, None, :] >= available[:, None, None], 2.0)
    take = min(slots, num_blocks)
    chosen = keys.topk(take, dim=2, largest=False)
    idx = torch.where(chosen.values < 2.0, chosen.indices, torch.full_like(chosen.indices, -1))
    if take < slots:
        idx = torch.cat([idx, torch.full((len_q, heads_kv, slots - take), -1, device=device, dtype=idx.dtype)], 2)
    if junk:
        r = torch.rand(len_q, heads_kv, slots, generator=generator, device=device)
        idx = torch.where((r < 0.05) & (idx < 0), torch.full_like(idx, num_blocks + 3), idx)  # out of range
        future = (position // block_size + 1)[:, None, None].expand_as(idx)
        idx = torch.where((r > 0.95) & (idx < 0) & (future < num_blocks), future, idx)       # after the diagonal
    perm = torch.rand(len_q, heads_kv, slots, generator=generator, device=device).argsort(dim=2)
    return idx.gather(2, perm).to(torch.int32).contiguous()


def key_mask(idx, cnt, len_q, len_k, block_size):
    """[len_q, heads_kv, len_k] bool: the keys J(t, h) of the contract."""
    heads_kv, slots = idx.shape[1], idx.shape[2]
    num_blocks = max(1, -(-len_k // block_size))
    position = torch.arange(len_q, device=idx.device) + len_k - len_q
    b = idx.long()
    valid = (b >= 0) & (b < num_blocks) & (b * block_size <= position[:, None, None])
    if cnt is not None:
        valid &= torch.arange(slots, device=idx.device)[None, None, :] < cnt[:, :, None].clamp(0, slots)
    chosen = torch.zeros(len_q, heads_kv, num_blocks + 1, dtype=torch.bool, device=idx.device)
    chosen.scatter_(2, torch.where(valid, b, num_blocks), True)
    keys = torch.arange(len_k, device=idx.device)
    mask = chosen[:, :, keys // block_size]
    return mask & (keys[None, None, :] <= position[:, None, None])


def reference(q, k, v, mask, scale):
    """Float32 attention of one sequence under a [len_q, heads_kv, len_k] key mask."""
    hq, hk = q.shape[1], k.shape[1]
    g = hq // hk
    s = torch.einsum("qhd,khd->hqk", q, k.repeat_interleave(g, dim=1)) * scale
    m = mask.repeat_interleave(g, dim=1).permute(1, 0, 2)
    s = s.masked_fill(~m, float("-inf"))
    lse = torch.logsumexp(s, dim=2)
    prob = torch.nan_to_num(torch.exp(s - lse[..., None]), nan=0.0)
    out = torch.einsum("hqk,khd->qhd", prob, v.repeat_interleave(g, dim=1))
    return out, lse.transpose(0, 1)


def load(path):
    lib = ba.Aotk(path)
    lib.lib.aotk_sel_fwd.argtypes = [ctypes.POINTER(ba.AotkSelParams), ctypes.c_void_p]
    lib.lib.aotk_sel_bwd.argtypes = [ctypes.POINTER(ba.AotkSelParams), ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.lib.aotk_sel_query.argtypes = [ctypes.c_int, ctypes.POINTER(ba.AotkSelParams), ctypes.POINTER(ba.AotkKernelInfo)]
    return lib


def sel_params(t):
    p = ba.AotkSelParams()
    p.struct_size = ctypes.sizeof(ba.AotkSelParams)
    for name in ("q", "k", "v", "out", "lse", "cu_seqlens_q", "cu_seqlens_k", "block_idx", "block_cnt",
                 "dout", "dq", "dk", "dv"):
        if t.get(name) is not None:
            setattr(p, name, ba.describe_tensor(t[name]))
    p.block_size = t["block_size"]
    p.max_seqlen_k = t.get("max_seqlen_k", 0)
    return p


def run_case(lib, name, dtype=torch.bfloat16, lengths=((300, 300),), hq=8, hk=2, dqk=64, dv=64, block_size=32,
             slots=4, use_cnt=False, seed=0):
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(seed)
    varlen = len(lengths) > 1
    tq = sum(a for a, _ in lengths)
    tk = sum(b for _, b in lengths)
    q = torch.randn(tq, hq, dqk, device=dev, generator=gen).to(dtype)
    k = torch.randn(tk, hk, dqk, device=dev, generator=gen).to(dtype)
    v = torch.randn(tk, hk, dv, device=dev, generator=gen).to(dtype)
    dout = torch.randn(tq, hq, dv, device=dev, generator=gen).to(dtype)
    idx = torch.cat([random_indices(a, b, hk, slots, block_size, gen, dev) for a, b in lengths])
    cnt = torch.randint(0, slots + 1, (tq, hk), device=dev, generator=gen, dtype=torch.int32) if use_cnt else None
    scale = 1.0 / math.sqrt(dqk)
    t = {"q": q, "k": k, "v": v, "out": torch.full((tq, hq, dv), float("nan"), device=dev, dtype=dtype),
         "lse": torch.full((tq, hq), float("nan"), device=dev), "block_idx": idx, "block_cnt": cnt,
         "block_size": block_size, "dout": dout,
         "dq": torch.full_like(q, float("nan")), "dk": torch.full_like(k, float("nan")),
         "dv": torch.full_like(v, float("nan"))}
    if varlen:
        t["cu_seqlens_q"] = torch.tensor([0] + list(torch.tensor([a for a, _ in lengths]).cumsum(0)), device=dev,
                                         dtype=torch.int32)
        t["cu_seqlens_k"] = torch.tensor([0] + list(torch.tensor([b for _, b in lengths]).cumsum(0)), device=dev,
                                         dtype=torch.int32)
        t["max_seqlen_k"] = max(b for _, b in lengths)
    p = sel_params(t)
    lib.check(lib.lib.aotk_sel_fwd(ctypes.byref(p), None), "aotk_sel_fwd")
    info = ba.AotkKernelInfo()
    info.struct_size = ctypes.sizeof(info)
    lib.check(lib.lib.aotk_sel_query(4, ctypes.byref(p), ctypes.byref(info)), "aotk_sel_query")
    ws = torch.empty(max(info.workspace_bytes, 16), device=dev, dtype=torch.uint8)
    lib.check(lib.lib.aotk_sel_bwd(ctypes.byref(p), ws.data_ptr(), info.workspace_bytes, None), "aotk_sel_bwd")
    torch.cuda.synchronize()

    errors = {}
    qa, ka, va = (x.float().requires_grad_() for x in (q, k, v))
    outs, lses = [], []
    q0 = k0 = 0
    for i, (a, b) in enumerate(lengths):
        m = key_mask(idx[q0:q0 + a], cnt[q0:q0 + a] if cnt is not None else None, a, b, block_size)
        o, l = reference(qa[q0:q0 + a], ka[k0:k0 + b], va[k0:k0 + b], m, scale)
        outs.append(o)
        lses.append(l)
        q0 += a
        k0 += b
    out_ref = torch.cat(outs)
    lse_ref = torch.cat(lses).detach()
    out_ref.backward(dout.float())
    finite = torch.isfinite(lse_ref)
    errors["lse_inf"] = float((torch.isfinite(t["lse"]) != finite).sum())
    errors["lse"] = float((t["lse"][finite] - lse_ref[finite]).abs().max() / lse_ref[finite].abs().max().clamp(min=1))
    for key, got, ref in (("out", t["out"], out_ref), ("dq", t["dq"], qa.grad), ("dk", t["dk"], ka.grad),
                          ("dv", t["dv"], va.grad)):
        ref = ref.detach()
        errors[key] = float((got.float() - ref).abs().max() / ref.abs().max().clamp(min=1e-6))
    bad = [key for key, e in errors.items() if not (e <= (0 if key == "lse_inf" else 0.03))]
    print(f"{'ok  ' if not bad else 'FAIL'} {name}: " + " ".join(f"{key} {e:.2e}" for key, e in errors.items()),
          flush=True)
    return not bad


def quick_times(lib, tokens, profile=False):
    """A development aid, not the benchmark (bench_attn.py's sel rows are): aotk's selection forward and
    backward against dense causal FlashAttention-2 on the same q, k, v."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(1)
    hq, hk, d, bs, slots = 64, 4, 128, 64, 16
    q = torch.randn(tokens, hq, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(tokens, hk, d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(tokens, hk, d, device=dev, dtype=torch.bfloat16)
    idx = random_indices(tokens, tokens, hk, slots, bs, gen, dev, junk=False)
    t = {"q": q, "k": k, "v": v, "out": torch.empty_like(q), "lse": torch.empty(tokens, hq, device=dev),
         "block_idx": idx, "block_size": bs, "dout": torch.randn_like(q), "dq": torch.empty_like(q),
         "dk": torch.empty_like(k), "dv": torch.empty_like(v)}
    p = sel_params(t)
    info = ba.AotkKernelInfo()
    info.struct_size = ctypes.sizeof(info)
    lib.check(lib.lib.aotk_sel_query(4, ctypes.byref(p), ctypes.byref(info)), "aotk_sel_query")
    ws = torch.empty(info.workspace_bytes, device=dev, dtype=torch.uint8)
    stream = torch.cuda.current_stream().cuda_stream
    fwd = lambda: lib.lib.aotk_sel_fwd(ctypes.byref(p), stream)
    bwd = lambda: lib.lib.aotk_sel_bwd(ctypes.byref(p), ws.data_ptr(), info.workspace_bytes, stream)
    fwd()
    qd, kd, vd = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
    kd, vd = (x.repeat_interleave(hq // hk, dim=1) for x in (kd, vd))
    qg, kg, vg = (x.detach().requires_grad_() for x in (qd, kd, vd))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o = torch.nn.functional.scaled_dot_product_attention(qg, kg, vg, is_causal=True)
        go = torch.randn_like(o)
        fa_fwd = lambda: torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=True)
        fa_bwd = lambda: torch.autograd.grad(o, (qg, kg, vg), go, retain_graph=True)
        times = {name: ba.time_ms(fn) for name, fn in (("sel_fwd", fwd), ("sel_bwd", bwd), ("fa2_fwd", fa_fwd),
                                                       ("fa2_bwd", fa_bwd))}
    if profile:
        from torch.profiler import ProfilerActivity, profile as torch_profile
        for _ in range(3):
            fwd()
            bwd()
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                fwd()
                bwd()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))
    print(f"{tokens} tokens: " + " ".join(f"{n} {ms:.3f} ms" for n, ms in times.items())
          + f"  fwd {times['fa2_fwd'] / times['sel_fwd']:.2f}x  bwd {times['fa2_bwd'] / times['sel_bwd']:.2f}x",
          flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--time", default="", help="comma-separated token counts to time (a development aid)")
    ap.add_argument("--profile", action="store_true", help="with --time: kernel times from torch.profiler")
    ap.add_argument("--no-check", action="store_true")
    args = ap.parse_args()
    lib = load(args.lib)
    for tokens in [int(x) for x in args.time.split(",") if x]:
        quick_times(lib, tokens, args.profile)
    if args.no_check:
        return
    cases = [
        dict(name="d64 bs32 G4", hq=8, hk=2, dqk=64, dv=64, block_size=32, slots=4),
        dict(name="d128 bs64 G16", hq=32, hk=2, dqk=128, dv=128, block_size=64, slots=8, lengths=((1000, 1000),)),
        dict(name="d192/128 bs64 G16 fp16", dtype=torch.float16, hq=16, hk=1, dqk=192, dv=128, block_size=64,
             slots=8, lengths=((700, 700),)),
        dict(name="d128 bs128 G64", hq=64, hk=1, dqk=128, dv=128, block_size=128, slots=3, lengths=((600, 600),)),
        dict(name="d64 bs64 G1 cnt", hq=4, hk=4, dqk=64, dv=64, block_size=64, slots=5, use_cnt=True,
             lengths=((500, 500),)),
        dict(name="varlen d128 bs32 G4", hq=8, hk=2, dqk=128, dv=128, block_size=32, slots=6,
             lengths=((100, 300), (0, 50), (257, 257), (31, 31), (64, 1))),
        dict(name="d128 bs64 G32 varlen lq>lk", hq=64, hk=2, dqk=128, dv=128, block_size=64, slots=4,
             lengths=((200, 100), (90, 400))),
    ]
    ok = True
    for i, c in enumerate(cases):
        try:
            ok &= run_case(lib, seed=i, **c)
        except Exception as e:  # one failing case does not hide the others
            print(f"FAIL {c['name']}: {type(e).__name__}: {e}", flush=True)
            ok = False
    print(f"{sum(1 for _ in cases)} cases: {'all passed' if ok else 'FAILURES'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
