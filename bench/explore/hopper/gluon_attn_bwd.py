"""The host side of the Gluon backward exploration (gluon_attn_bwd_kernels.py holds the kernels and,
in its docstring, the design and the RESULTS): aotk's pre-pass and dQ passes through the JIT, the Gluon
kernel's launcher (GluonBwd), aotk's own backward (AotkBwd), compile_aot, the checks and the timing.

Run (GPU machine, from the repository root): python3 bench/explore/hopper/gluon_attn_bwd.py
[--quick] [--configs a,b] [--seqlens ...] [--dims ...] [--causal 0,1]; `--aot` compiles here.
"""

import functools
import math
import os
import sys

import triton
from triton.experimental.gluon import language as gl

from gluon_attn_bwd_kernels import (CONFIGS, DEFAULT_CONFIG, HERE, KERNELS, LOG2E, config_ok, dq_convert_kernel,
                                    gluon_attn_bwd_dkdv_kernel)

# ----------------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------------


def _gl_dtype(name):
    return {"bf16": gl.bfloat16, "fp16": gl.float16}[name]


def _smem_layout(block, dtype_name):
    return gl.NVMMASharedLayout.get_default_for(block, _gl_dtype(dtype_name))


def _dq_smem_layout(block):
    return gl.NVMMASharedLayout.get_default_for(block, gl.float32)


def _kernel_params(cfg, head_dim, causal, fused_dq):
    return dict(CAUSAL=bool(causal), FUSED_DQ=bool(fused_dq), PIPE=cfg.get("PIPE", False),
                WRITER=bool(fused_dq and cfg.get("WRITER", False)), DK_RS=cfg.get("DK_RS", False),
                TMA_REDUCE=bool(fused_dq and cfg.get("TMA_REDUCE", False)), PREFETCH=cfg.get("PREFETCH", False),
                BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                HEAD_DIM=head_dim, STAGES=cfg["STAGES"], PRODUCER_REGS=cfg["producer_regs"]), \
        dict(num_warps=8, maxnreg=cfg["maxnreg"])


@functools.lru_cache(maxsize=None)
def _aotk_kernels():
    if KERNELS not in sys.path:
        sys.path.insert(0, KERNELS)
    import attn_bwd
    return attn_bwd


def _dummy(device):
    import torch
    return torch.zeros(16, device=device, dtype=torch.int32)


def preprocess(out, do, lse, ws):
    """aotk's pre-pass into ws = (delta, lse_log2), fp32 [2, batch * heads_q, stats_stride]; padded rows neutral."""
    k = _aotk_kernels()
    b, sq, hq, d = out.shape
    stats_stride = ws.shape[2]
    blocks = stats_stride // 64
    dummy = _dummy(out.device)
    k.attn_bwd_preprocess[(blocks * b * hq, )](out, do, lse, ws[0], ws[1], dummy, dummy, dummy,
                                               *out.stride()[:3], *do.stride()[:3], lse.stride(0), lse.stride(1),
                                               sq, hq, b, blocks, stats_stride, d // 8, 0,
                                               HEAD_DIM_V=d, BLOCK_M=64, num_warps=4, num_stages=1)


def _new_stats(q):
    import torch
    b, sq, hq, _ = q.shape
    return torch.empty(2, b * hq, triton.cdiv(sq, 128) * 128, device=q.device, dtype=torch.float32)


# The catalog's sm_90 configs for the plain (no EXTRAS) kernels (codegen/aotk_catalog.py ATTN_TUNING),
# (BLOCK_M, BLOCK_N, num_warps, num_stages); dK/dV's is chosen by seqlen_k.
def _aotk_dkdv_config(d, seqlen_k):
    if d == 128:
        return (64, 128, 8, 3) if seqlen_k >= 4096 else (64, 64, 4, 2)
    return (32, 64, 4, 2)


AOTK_DQ_CONFIG = (128, 64, 8, 3)


class AotkBwd:
    """aotk's current backward (kernels/attn_bwd.py: pre-pass, dK/dV, dQ) through the JIT, launched the way
    src/attn/aotk_attn.c's launch_bwd does, with the catalog's configs. Buffers allocated once."""

    def __init__(self, q, k, v, out, do, lse, causal, softmax_scale=None):
        import torch
        self.kern = _aotk_kernels()
        self.q, self.k, self.v, self.out, self.do, self.lse, self.causal = q, k, v, out, do, lse, causal
        d = q.shape[3]
        self.scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
        self.ws = _new_stats(q)
        self.dq, self.dk, self.dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        self.dummy = _dummy(q.device)

    def pre(self):
        preprocess(self.out, self.do, self.lse, self.ws)

    def dkdv(self):
        q, k, v, do, dk, dv, ws = self.q, self.k, self.v, self.do, self.dk, self.dv, self.ws
        b, sq, hq, d = q.shape
        sk, hkv = k.shape[1], k.shape[2]
        bm, bn, w, st = _aotk_dkdv_config(d, sk)
        n_blocks = triton.cdiv(sk, bn)
        flags = 128 if self.causal else 0  # FLAG_REVERSE for causal-like masks
        x = self.dummy
        self.kern.attn_bwd_dkdv[(n_blocks * b * hkv, )](
            q, k, v, do, ws[1], ws[0], dk, dv, x, x, x, x, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            *do.stride()[:3], *dk.stride()[:3], *dv.stride()[:3], 0, sq, sk, hq, hkv, hq // hkv, n_blocks,
            ws.shape[2], d // 8, d // 8, -1, 0 if self.causal else -1, flags, self.scale, self.scale * LOG2E, 0.0, 0.0,
            0, 1.0, HEAD_DIM_QK=d, HEAD_DIM_V=d, BLOCK_M=bm, BLOCK_N=bn, EXTRAS=False, num_warps=w, num_stages=st)

    def dq_pass(self, dq=None):
        q, k, v, do, ws = self.q, self.k, self.v, self.do, self.ws
        dq = self.dq if dq is None else dq
        b, sq, hq, d = q.shape
        sk, hkv = k.shape[1], k.shape[2]
        bm, bn, w, st = AOTK_DQ_CONFIG
        m_blocks = triton.cdiv(sq, bm)
        flags = 128 if self.causal else 0
        x = self.dummy
        self.kern.attn_bwd_dq[(m_blocks * b * hq, )](
            q, k, v, do, ws[1], ws[0], dq, x, x, x, x, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
            *do.stride()[:3], *dq.stride()[:3], 0, sq, sk, hq, hq // hkv, m_blocks, ws.shape[2], d // 8, d // 8, -1,
            0 if self.causal else -1, flags, self.scale, self.scale * LOG2E, 0.0, 0.0, 0, 1.0,
            HEAD_DIM_QK=d, HEAD_DIM_V=d, BLOCK_M=bm, BLOCK_N=bn, EXTRAS=False, num_warps=w, num_stages=st)

    def run(self):
        self.pre()
        self.dkdv()
        self.dq_pass()
        return self.dq, self.dk, self.dv


class GluonBwd:
    """The Gluon backward. fused_dq: dQ by atomics inside the Gluon kernel (non-deterministic: pre-pass,
    memset of the fp32 accumulator, Gluon kernel, convert); else pre-pass, the Gluon kernel for dK/dV
    only, aotk's dQ pass (deterministic). Buffers and TMA descriptors built once."""

    def __init__(self, q, k, v, out, do, lse, causal, softmax_scale=None, config=None, fused_dq=True):
        import torch
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
        batch, sq, hq, d = q.shape
        _, sk, hkv, _ = k.shape
        config = DEFAULT_CONFIG[d] if config is None else config
        cfg = CONFIGS[config] if isinstance(config, str) else config
        assert k.shape == v.shape and k.shape[0] == batch and k.shape[3] == d and do.shape == q.shape
        assert hq % hkv == 0 and config_ok(cfg, d)
        assert q.dtype in (torch.bfloat16, torch.float16) and all(x.dtype == q.dtype for x in (k, v, do))
        assert all(x.stride(-1) == 1 for x in (q, k, v, do))
        self.aotk = AotkBwd(q, k, v, out, do, lse, causal, softmax_scale)  # pre-pass and (split) dQ pass
        self.scale = self.aotk.scale
        self.fused_dq = fused_dq
        self.ws = self.aotk.ws
        self.dq, self.dk, self.dv = self.aotk.dq, self.aotk.dk, self.aotk.dv
        stats_stride = self.ws.shape[2]
        self.dq_acc = torch.zeros(batch * hq, stats_stride, d, device=q.device, dtype=torch.float32) if fused_dq \
            else self.ws
        dname = "bf16" if q.dtype == torch.bfloat16 else "fp16"
        BM, BN = cfg["BLOCK_M"], cfg["BLOCK_N"]
        q_blk, kv_blk = [1, BM, 1, d], [1, BN, 1, d]
        self.descs = [TensorDescriptor(x, list(x.shape), list(x.stride()), blk, _smem_layout(blk, dname))
                      for x, blk in ((q, q_blk), (k, kv_blk), (v, kv_blk), (do, q_blk))]
        # The fp32 dQ accumulator through a descriptor (read by the TMA reduce-add configs only).
        acc = self.dq_acc if fused_dq else torch.zeros(1, BM, d, device=q.device, dtype=torch.float32)
        dq_blk = [1, BM, d]
        self.descs.append(TensorDescriptor(acc, list(acc.shape), list(acc.stride()), dq_blk, _dq_smem_layout(dq_blk)))
        n_blocks = triton.cdiv(sk, BN)
        self.grid = (n_blocks * batch * hkv, )
        self.args = (self.ws[1], self.ws[0], self.dq_acc, self.dk, self.dv, *self.dk.stride()[:3],
                     *self.dv.stride()[:3], sq, sk, hq, hkv, hq // hkv, n_blocks, stats_stride, self.scale,
                     self.scale * LOG2E)
        self.cx, self.opts = _kernel_params(cfg, d, causal, fused_dq)
        self.convert_grid = (stats_stride // 64 * batch * hq, )
        self.shape = (sq, hq, stats_stride, d)

    def kernel(self):
        gluon_attn_bwd_dkdv_kernel[self.grid](*self.descs, *self.args, **self.cx, **self.opts)

    def convert(self):
        sq, hq, stats_stride, d = self.shape
        dq = self.dq
        dq_convert_kernel[self.convert_grid](self.dq_acc, dq, *dq.stride()[:3], sq, hq, stats_stride,
                                             stats_stride // 64, 1.0, HEAD_DIM=d, BLOCK_M=64, num_warps=4)

    def run(self):
        self.aotk.pre()
        if self.fused_dq:
            self.dq_acc.zero_()
            self.kernel()
            self.convert()
        else:
            self.kernel()
            self.aotk.dq_pass()
        return self.dq, self.dk, self.dv


# ----------------------------------------------------------------------------------------------------
# Ahead-of-time compile (no GPU): registers, spills, shared memory, instruction counts
# ----------------------------------------------------------------------------------------------------


def _signature(cfg, head_dim, dname):
    BM, BN = cfg["BLOCK_M"], cfg["BLOCK_N"]

    def td(blk):
        return f"tensordesc<{dname}[{', '.join(map(str, blk))}],{_smem_layout(blk, dname)!r}>"

    q_blk, kv_blk = [1, BM, 1, head_dim], [1, BN, 1, head_dim]
    dq_blk = [1, BM, head_dim]
    dq_td = f"tensordesc<fp32[{', '.join(map(str, dq_blk))}],{_dq_smem_layout(dq_blk)!r}>"
    sig = {"q_desc": td(q_blk), "k_desc": td(kv_blk), "v_desc": td(kv_blk), "do_desc": td(q_blk), "dq_desc": dq_td,
           "LseLog2": "*fp32", "Delta": "*fp32", "DQAcc": "*fp32", "DK": f"*{dname}", "DV": f"*{dname}"}
    for name in ("stride_dkb", "stride_dks", "stride_dkh", "stride_dvb", "stride_dvs", "stride_dvh", "seqlen_q",
                 "seqlen_k", "heads_q", "heads_kv", "group_size", "num_n_blocks", "stats_stride"):
        sig[name] = "i32"
    sig["softmax_scale"] = "fp32"
    sig["qk_scale_log2"] = "fp32"
    for name in ("CAUSAL", "FUSED_DQ", "PIPE", "WRITER", "DK_RS", "TMA_REDUCE", "PREFETCH", "BLOCK_M", "BLOCK_N",
                 "HEAD_DIM", "STAGES", "PRODUCER_REGS"):
        sig[name] = "constexpr"
    return sig


def compile_aot(head_dim=128, causal=False, fused_dq=True, config="bm64_s2", dtype="bf16", verbose=True,
                dump_dir=None):
    """Compile for sm_90a with no GPU; ptxas -v on the PTX for registers and spills."""
    import re
    import subprocess
    import tempfile
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    cfg = CONFIGS[config]
    cx, opts = _kernel_params(cfg, head_dim, causal, fused_dq)
    src = GluonASTSource(fn=gluon_attn_bwd_dkdv_kernel, signature=_signature(cfg, head_dim, dtype), constexprs=cx,
                         attrs={(i, ): [["tt.divisibility", 16]] for i in range(5, 16)})
    ck = triton.compile(src, target=GPUTarget("cuda", 90, 64), options=opts)
    ptx = ck.asm["ptx"]
    counts = {k: len(re.findall(k, ptx)) for k in ("wgmma.mma_async", "wgmma.wait_group", "red.global", "atom.global",
                                                   "cp.async.bulk.tensor", "mbarrier.try_wait", "bar.sync",
                                                   "st.shared", "ld.shared", "ld.local", "st.local")}
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    usage = ""
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, "k.ptx")
        with open(p, "w") as f:
            f.write(ptx)
        r = subprocess.run([ptxas, "-arch=sm_90a", "-v", f"--maxrregcount={opts['maxnreg']}", p, "-o",
                            os.path.join(tmp, "k.cubin")], capture_output=True, text=True)
        usage = " ".join(line.strip() for line in (r.stdout + r.stderr).splitlines()
                         if "registers" in line or "spill" in line or "stack" in line or "warning" in line)
    md = ck.metadata
    info = dict(config=config, head_dim=head_dim, causal=causal, fused_dq=fused_dq, num_warps=md.num_warps,
                shared=md.shared, setmaxnreg=sorted(set(re.findall(r"setmaxnreg\.(\w+)\.sync\.aligned\.u32\s+(\d+)",
                                                                     ptx))), ptx_counts=counts, ptxas=usage)
    if verbose:
        print(f"== {config} d={head_dim} causal={int(causal)} fused_dq={int(fused_dq)}: warps {md.num_warps} "
              f"smem {md.shared} setmaxnreg {info['setmaxnreg']}\n   {counts}\n   ptxas: {usage}", flush=True)
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
        stem = f"bwd_{config}_d{head_dim}_{'causal' if causal else 'full'}_{'fused' if fused_dq else 'split'}"
        for ext in ("ttgir", "ptx"):
            with open(os.path.join(dump_dir, f"{stem}.{ext}"), "w") as f:
                f.write(ck.asm[ext])
    return ck, info


# ----------------------------------------------------------------------------------------------------
# Check and time (GPU machine)
# ----------------------------------------------------------------------------------------------------

# (batch, seqlen_q, seqlen_k, heads_q, heads_kv): sizes that are not multiples of the tiles, GQA, and
# seqlen_q > seqlen_k (causal rows that see no key: no gradient).
CHECK_CASES = [(2, 1024, 1024, 8, 8), (1, 1000, 1000, 4, 4), (2, 200, 333, 8, 2), (1, 333, 200, 4, 4),
               (1, 4097, 4097, 2, 1)]
QUICK_CHECK_CASES = CHECK_CASES[:4]
VARIANTS = ("fused", "split")  # Gluon kernel with atomic dQ; Gluon dK/dV + aotk dQ


def _variants(cname):
    # PIPE only changes the fused kernel (where its dQ atomics go).
    cfg = CONFIGS[cname]
    return ("fused", ) if cfg.get("PIPE") or cfg.get("WRITER") or cfg.get("TMA_REDUCE") else VARIANTS


def _emit(rec):
    import json
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gluon_bwd.json"), "a") as f:
            f.write(json.dumps(rec) + "\n")


def _errors(got, ref):
    import torch
    res = {}
    for name, x, r in zip(("dq", "dk", "dv"), got, ref):
        xf = x.float()
        res[name] = dict(max_abs=(xf - r).abs().max().item(), rel=((xf - r).norm() / r.norm()).item(),
                         nan=bool(torch.isnan(xf).any().item()))
    return res


def run_checks(dims, cases, config_names):
    import torch
    sys.path.insert(0, os.path.join(HERE, ".."))
    from tune_bwd_jit import reference  # fp32 autograd, bottom-right causal, GQA, rows with no key -> 0
    ok_all = True
    for d in dims:
        for causal in (False, True):
            for case in cases:
                b, sq, sk, hq, hkv = case
                torch.manual_seed(hash((d, causal, case)) % 1000)
                q = torch.randn(b, sq, hq, d, device="cuda", dtype=torch.bfloat16)
                k = torch.randn(b, sk, hkv, d, device="cuda", dtype=torch.bfloat16)
                v = torch.randn_like(k)
                do = torch.randn_like(q)
                o_ref, lse_ref, dq_ref, dk_ref, dv_ref = reference(q, k, v, do, causal)
                out = o_ref.to(torch.bfloat16).contiguous()
                lse = lse_ref.contiguous()
                ref = (dq_ref, dk_ref, dv_ref)
                a = AotkBwd(q, k, v, out, do, lse, causal)
                for x in (a.dq, a.dk, a.dv):
                    x.fill_(float("nan"))
                base = _errors(a.run(), ref)
                line = [f"check d={d} causal={int(causal)} {case}: aotk max|err| dq {base['dq']['max_abs']:.2e} "
                        f"dk {base['dk']['max_abs']:.2e} dv {base['dv']['max_abs']:.2e}"]
                _emit(dict(kind="check", impl="aotk", d=d, causal=causal, case=case, err=base))
                for cname in config_names:
                    if not config_ok(CONFIGS[cname], d):
                        continue
                    for variant in _variants(cname):
                        try:
                            g = GluonBwd(q, k, v, out, do, lse, causal, config=cname, fused_dq=variant == "fused")
                            for x in (g.dq, g.dk, g.dv):
                                x.fill_(float("nan"))
                            err = _errors(g.run(), ref)
                            torch.cuda.synchronize()
                            # Same-precision bound: 2x aotk's own error (bf16 inputs, fp32 accumulation) + floor.
                            ok = all(not err[t]["nan"] and err[t]["rel"] <= 2 * base[t]["rel"] + 2e-3
                                     for t in ("dq", "dk", "dv"))
                            ok_all &= ok
                            line.append(f"{cname}/{variant} dq {err['dq']['max_abs']:.2e} dk {err['dk']['max_abs']:.2e}"
                                        f" dv {err['dv']['max_abs']:.2e} rel {max(e['rel'] for e in err.values()):.1e}"
                                        f" {'OK' if ok else 'FAIL'}")
                            _emit(dict(kind="check", impl=f"gluon_{variant}", config=cname, d=d, causal=causal,
                                       case=case, err=err, ok=ok))
                        except Exception as e:  # keep going
                            ok_all = False
                            line.append(f"{cname}/{variant} ERROR {type(e).__name__}: {str(e)[:300]}")
                            _emit(dict(kind="check", impl=f"gluon_{variant}", config=cname, d=d, causal=causal,
                                       case=case, error=f"{type(e).__name__}: {e}"[:2000]))
                print(" | ".join(line), flush=True)
    return ok_all


def _bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")


def run_timing(dims, seqlens, config_names, causals=(False, True), parts=True):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    for d in dims:
        for causal in causals:
            for n in seqlens:
                b, h = 16384 // n, 2048 // d
                torch.manual_seed(n + d)
                q = torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                k = torch.randn_like(q, requires_grad=True)
                v = torch.randn_like(q, requires_grad=True)
                do = torch.randn_like(q)
                flops = 2.5 * 4.0 * b * h * n * n * d / (2 if causal else 1)
                tf = {}
                ms = {}
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                       is_causal=causal)
                    g = do.transpose(1, 2)
                    ms["cudnn"] = _bench(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
                del o
                with torch.no_grad():
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(
                            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)[:2]
                    out = out.transpose(1, 2).contiguous()
                    lse = lse.contiguous()
                    qd, kd, vd = q.detach(), k.detach(), v.detach()
                    a = AotkBwd(qd, kd, vd, out, do, lse, causal)
                    ms["aotk"] = _bench(a.run)
                    if parts:
                        ms["aotk_pre"] = _bench(a.pre)
                        ms["aotk_dkdv"] = _bench(a.dkdv)
                        ms["aotk_dq"] = _bench(a.dq_pass)
                    ref = [x.float() for x in a.run()]
                    diffs = {}
                    for cname in config_names:
                        if not config_ok(CONFIGS[cname], d):
                            continue
                        for variant in _variants(cname):
                            key = f"{variant}:{cname}"
                            try:
                                gb = GluonBwd(qd, kd, vd, out, do, lse, causal, config=cname,
                                              fused_dq=variant == "fused")
                                got = gb.run()
                                diffs[key] = max(((x.float() - r).norm() / r.norm()).item() for x, r in zip(got, ref))
                                ms[key] = _bench(gb.run)
                                if parts:
                                    ms[key + ":kernel"] = _bench(gb.kernel)
                                del gb
                            except Exception as e:  # keep going
                                print(f"  {key} d={d} causal={int(causal)} n={n}: ERROR {type(e).__name__}: "
                                      f"{str(e)[:300]}", flush=True)
                    del a
                for key, t in ms.items():
                    tf[key] = flops / t / 1e9
                rec = dict(kind="time", d=d, causal=causal, seqlen=n, batch=b, heads=h, ms=ms, tflops=tf,
                           rel_diff_vs_aotk=diffs, device=torch.cuda.get_device_name())
                rows.append(rec)
                _emit(rec)
                cu = tf["cudnn"]
                best = max((kk for kk in tf if kk.count(":") == 1), key=lambda kk: tf[kk], default=None)
                gl_part = " ".join(f"{kk.split(':')[0]}[{kk.split(':')[1]}] {tf[kk]:.0f} ({tf[kk] / cu:.2f}x)"
                                   for kk in tf if kk.count(":") == 1)
                print(f"d={d} c={int(causal)} n={n:5d}: cudnn {cu:.0f} "
                      f"aotk {tf['aotk']:.0f} ({tf['aotk'] / cu:.2f}x) | "
                      f"{gl_part} | maxdiff {max(diffs.values(), default=float('nan')):.1e}", flush=True)
                if parts:
                    kp = " ".join(f"{kk} {ms[kk]:.3f}" for kk in ms if kk.startswith("aotk_") or kk.endswith("kernel"))
                    print(f"    ms: {kp}", flush=True)
                del q, k, v, do, out, lse, ref
                torch.cuda.empty_cache()
    return rows


def _summary(rows, config_names):
    keys = sorted({kk for r in rows for kk in r["tflops"] if kk.count(":") == 1})
    print("\nsummary (TFLOP/s; ratio to cuDNN in parentheses; geomean of ratios last)")
    for kk in ["aotk"] + keys:
        ratios = [r["tflops"][kk] / r["tflops"]["cudnn"] for r in rows if kk in r["tflops"]]
        if ratios:
            gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            print(f"  {kk:20s} geomean {gm:.2f}x over {len(ratios)} rows, min {min(ratios):.2f} max {max(ratios):.2f}")


def main():
    import argparse
    import subprocess
    ap = argparse.ArgumentParser()
    ap.add_argument("--aot", action="store_true", help="compile for sm_90a here (no GPU) and report resources")
    ap.add_argument("--phase", default=None, help="(internal) run one phase in this process: check | time")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dims", default="128,64")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--configs", default="bm64_s2_tr_rs,bm64_s2_rs")
    ap.add_argument("--no-parts", action="store_true")
    ap.add_argument("--check-timeout", type=int, default=150)
    ap.add_argument("--time-timeout", type=int, default=240)
    a = ap.parse_args()
    dims = [int(x) for x in a.dims.split(",")]
    config_names = a.configs.split(",")
    if a.aot:
        for cname in config_names:
            for d in dims:
                if not config_ok(CONFIGS[cname], d):
                    continue
                for causal in (False, True):
                    for fused in (True, False):
                        _, info = compile_aot(d, causal, fused, cname)
                        _emit(dict(kind="aot", **info))
        return
    if a.phase == "check":
        ok = run_checks(dims, QUICK_CHECK_CASES if a.quick else CHECK_CASES, config_names)
        print(f"checks: {'ALL OK' if ok else 'SOME FAILED'}", flush=True)
        sys.exit(0 if ok else 3)
    if a.phase == "time":
        rows = run_timing(dims, [int(x) for x in a.seqlens.split(",")], config_names,
                          tuple(bool(int(x)) for x in a.causal.split(",")), parts=not a.no_parts)
        _summary(rows, config_names)
        return
    # Each phase in its own process with a time limit: a deadlocked warp-specialized kernel never
    # returns, and an illegal address poisons the CUDA context.
    base = [sys.executable, os.path.abspath(__file__), "--dims", a.dims, "--configs", a.configs]
    for phase, extra, limit in (("check", ["--quick"] if a.quick else [], a.check_timeout),
                                ("time", ["--seqlens", a.seqlens, "--causal", a.causal] +
                                 (["--no-parts"] if a.no_parts else []), a.time_timeout)):
        try:
            r = subprocess.run(base + ["--phase", phase] + extra, timeout=limit)
            print(f"[{phase}] exit {r.returncode}", flush=True)
            if phase == "check" and r.returncode != 0:
                print("[time] skipped: checks failed", flush=True)
                break
        except subprocess.TimeoutExpired:
            print(f"[{phase}] TIMEOUT after {limit} s (deadlock?)", flush=True)
            break


if __name__ == "__main__":
    main()
