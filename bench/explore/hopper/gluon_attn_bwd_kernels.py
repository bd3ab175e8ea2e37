"""Experimental FlashAttention-3-style backward for the H100 (sm_90a), written in Gluon (Triton 3.6.0):
the kernels. gluon_attn_bwd.py beside it holds the host side, the checks and the timing.

JIT only, not part of the library build: it measures whether FA3's backward schedule, written in Gluon,
beats aotk's current Triton backward (kernels/attn_bwd.py) and cuDNN, so that a later session can
decide whether to port it into kernels/ and the C runtime. Results: see RESULTS at the end of this
docstring.

Layouts (aotk's): q, do [batch, seqlen_q, heads_q, d]; k, v [batch, seqlen_k, heads_kv, d]; bf16 or
fp16, last dim contiguous, other strides 16-byte aligned (TMA). lse fp32 [batch, heads_q, seqlen_q],
natural log, -inf for a row that saw no key. Causal is bottom-right (row i sees key j iff
j <= i + seqlen_k - seqlen_q). GQA: head_kv = head_q // (heads_q // heads_kv). d = 64 or 128.

Kernels:
- pre-pass: aotk's own attn_bwd_preprocess (delta = rowsum(dO * O) and lse * log2(e), +inf for rows
  that saw no key or lie past seqlen_q, in rows of stats_stride = seqlen_q rounded up to 128 floats),
  plus a memset of the fp32 dQ accumulator [batch * heads_q, stats_stride, d] in the fused mode.
- gluon_attn_bwd_dkdv_kernel: one program per (key block of BLOCK_N = 128, batch, kv head), warp
  specialized (12 warps once padded; setmaxnreg: consumers 240 registers, producer 24):
  * a 1-warp producer loads K and V once (TMA), then streams Q and dO tiles of BLOCK_M = 64 query rows
    through a ring of STAGES shared-memory stages (ready mbarriers for Q and dO apart, so that S^T
    can start before dO lands; one "empty" per stage), over every query head of the GQA group and
    every query block that sees the key block;
  * one 8-warp consumer partition (two warpgroups, 64 key rows each: the key block is the M side of
    every product, FA3's SdP_swapAB) computes per query block, with asynchronous wgmma:
      S^T = K Q^T, dP^T = V dO^T                   [BLOCK_N, BLOCK_M], fp32 in registers
      P^T = exp2(S^T * scale * log2e - lse)         (lse per column; masked only on diagonal blocks)
      dV += P^T dO                                  (P^T from registers, issued before dS is computed)
      dS^T = P^T * (dP^T - delta)
      dK += dS^T Q                                  (dS^T from shared memory, or DK_RS: registers)
      dQ  = dS K   (FUSED_DQ)                       (A = dS^T stored to shared memory (bf16, two
                                                     buffers), read transposed; [BLOCK_M, d] split
                                                     over the two warpgroups along d)
    FUSED_DQ adds each block's dQ (times softmax_scale) into the fp32 accumulator, not bitwise
    deterministic (the order of the additions varies), by one of:
      default     per-lane relaxed atomics (atom.global.add.v2.f32) from the consumer warps;
      WRITER      the consumers hand dQ to a 1-warp writer partition through shared memory, which
                  issues the atomics (v4);
      TMA_REDUCE  FA3's way: dQ to shared memory, one TMA reduce-add (cp.reduce.async.bulk.tensor,
                  through Gluon's builder: hopper.tma does not export it in 3.6) per block;
    PIPE issues a block's dQ atomics / reduce at the top of the next step, behind its S^T and dP^T;
    PREFETCH loads the next step's lse and delta at the end of a step.
  dK (times softmax_scale) and dV are written once per program with masked stores.
- fused mode: a small Triton kernel casts the fp32 accumulator into dq.
  Deterministic alternative ("split"): the same kernel computes only the 4 products of dK and dV, and
  aotk's own attn_bwd_dq pass computes dQ (3 products, one owner per query block).

Host: GluonBwd(q, k, v, out, do, lse, causal, config=..., fused_dq=...).run() -> (dq, dk, dv);
AotkBwd(...).run() runs aotk's current three kernels through the JIT with the catalog's sm_90 configs,
launched as src/attn/aotk_attn.c's launch_bwd does (tune_bwd_jit.py's run_bwd no longer matches the kernels'
signatures; its fp32 autograd `reference` is what the checks use); compile_aot(...) compiles the Gluon
kernel for sm_90a with no GPU and reports shared memory, setmaxnreg and ptxas' spills.

Run (GPU machine, from the repository root): python3 bench/explore/hopper/gluon_attn_bwd.py
[--quick] [--configs a,b] [--seqlens ...] [--dims ...] [--causal 0,1]: checks (fp32 autograd reference;
bound 2x aotk's own relative error + 2e-3), then times every row of the issue's grid (bf16,
batch * seqlen = 16384, heads * d = 2048) beside cuDNN (SDPA's CUDNN_ATTENTION backward through
autograd) and aotk's backward, in one process; JSON rows to $OUT/gluon_bwd.json. `--aot` compiles here.

RESULTS (H100 80GB HBM3 of the device tool, torch 2.11, triton 3.6.0, 2026-11-24; three runs.)
Registers (ptxas -v on this file's PTX for sm_90a): 240 per consumer thread, 24 producer; no spills for
bm64_s2, _rs, _tr, _tr_rs at d 64 and 128; _wr 4 bytes (d=128); _pipe and _tr_rs_pipe 12 bytes at one
d=128 variant each; _tr_rs_pf 24 bytes at d=128 causal; bm128_s2 (d=64) 96-220 bytes (never run).
Shared memory at d=128: 164 KB, 197 KB with the dQ staging buffer (_tr*, _wr).

Correctness: every variant run matched the fp32 autograd reference (tune_bwd_jit.reference) exactly as
closely as aotk's own backward (the same max |error| to 3 digits: d=128 non-causal (2, 1024, 1024, 8, 8)
dq 2.56e-3, dk 1.76e-3, dv 1.29e-3; causal 1.12e-2, 1.16e-2, 1.68e-2; relative 2.4-2.5e-3), over
(batch, seqlen_q, seqlen_k, heads_q, heads_kv) = (2, 1024, 1024, 8, 8), (1, 1000, 1000, 4, 4),
(2, 200, 333, 8, 2), (1, 333, 200, 4, 4) and (run 1) (1, 4097, 4097, 2, 1), d 64/128, causal or not.
On the benchmark rows the gradients differ from aotk's by at most 3.3e-4 (relative).

TFLOP/s (2.5 x the forward's FLOPs, causal halved; median of triton.testing.do_bench), ratio to cuDNN
in parentheses; everything a backward launches is timed (pre-pass, memset, convert, dQ pass):
| d   | causal | seqlen | cuDNN | aotk now    | fused _tr_rs | split _rs   | fused bm64_s2 (atomics) |
| 128 | 0      | 512    | 295   | 226 (0.77)  | 254 (0.86)   | 246 (0.83)  | 223 (0.76) |
| 128 | 0      | 1024   | 412   | 292 (0.71)  | 344 (0.83)   | 326 (0.79)  | 290 (0.70) |
| 128 | 0      | 2048   | 499   | 338 (0.68)  | 421 (0.84)   | 385 (0.77)  | 337 (0.68) |
| 128 | 0      | 4096   | 527   | 386 (0.73)  | 449 (0.85)   | 338 (0.64)* | 368 (0.70) |
| 128 | 0      | 8192   | 557   | 394 (0.71)  | 483 (0.87)   | 395 (0.71)  | 389 (0.70) |
| 128 | 0      | 16384  | 533   | 388 (0.73)  | 472 (0.89)   | 419 (0.79)  | 388 (0.73) |
| 128 | 1      | 512    | 170   | 155 (0.91)  | 163 (0.96)   | 165 (0.97)  | 148 (0.87) |
| 128 | 1      | 1024   | 285   | 225 (0.79)  | 253 (0.89)   | 243 (0.85)  | 219 (0.77) |
| 128 | 1      | 2048   | 386   | 285 (0.74)  | 334 (0.87)   | 310 (0.80)  | 281 (0.73) |
| 128 | 1      | 4096   | 459   | 340 (0.74)  | 404 (0.88)   | 359 (0.78)  | 330 (0.72) |
| 128 | 1      | 8192   | 493   | 357 (0.73)  | 450 (0.91)   | 380 (0.77)  | 364 (0.74) |
| 128 | 1      | 16384  | 508   | 399 (0.78)  | 496 (0.98)   | 399 (0.79)  | 407 (0.80) |
| 64  | 0      | 512    | 250   | 171 (0.68)  | 210 (0.84)   | 191 (0.77)  | 198 (0.79) |
| 64  | 0      | 1024   | 350   | 213 (0.61)  | 272 (0.78)   | 249 (0.71)  | 252 (0.72) |
| 64  | 0      | 2048   | 419   | 242 (0.58)  | 322 (0.77)   | 287 (0.69)  | 289 (0.69) |
| 64  | 0      | 4096   | 456   | 260 (0.57)  | 352 (0.77)   | 298 (0.65)  | 318 (0.70) |
| 64  | 0      | 8192   | 438   | 290 (0.66)  | 369 (0.84)   | 311 (0.71)  | 331 (0.76) |
| 64  | 0      | 16384  | 450   | 302 (0.67)  | 376 (0.84)   | 326 (0.72)  | 336 (0.75) |
| 64  | 1      | 512    | 149   | 134 (0.90)  | 135 (0.91)   | 128 (0.86)  | 128 (0.86) |
| 64  | 1      | 1024   | 233   | 187 (0.80)  | 203 (0.87)   | 186 (0.80)  | 188 (0.81) |
| 64  | 1      | 2048   | 316   | 231 (0.73)  | 267 (0.84)   | 238 (0.75)  | 241 (0.76) |
| 64  | 1      | 4096   | 378   | 261 (0.69)  | 316 (0.84)   | 276 (0.73)  | 279 (0.74) |
| 64  | 1      | 8192   | 421   | 280 (0.67)  | 349 (0.83)   | 299 (0.71)  | 306 (0.73) |
| 64  | 1      | 16384  | 450   | 295 (0.65)  | 374 (0.83)   | 320 (0.71)  | 332 (0.74) |
Geomean of the ratios over the 24 rows (run 2): aotk 0.71; fused _tr_rs 0.86 (d=128 0.88, d=64 0.83);
_tr 0.84; fused atomics bm64_s2 0.75, _rs 0.76; split bm64_s2 0.75, _rs 0.76. (*) an outlier: its
kernels alone measured as usual (Gluon dK/dV 2.06 ms, aotk dQ 1.23 ms), the whole backward not.
Run 1 (12 rows, seqlen 1k/4k/16k): _wr 0.76, bm64_s2 0.74, _pipe 0.71 (deferring the atomics made it
slower), aotk 0.70. Run 3 checked _tr_rs_pipe, _tr_rs_pf and _rs_pf (13 of 16 quick cases OK, then the
check phase hit its 75 s limit at d=64 causal (1, 1000, 1000, 4, 4), most likely compile time for 7
variants, a hang not excluded); they were never timed.
Run 4 (2026-11-25, --quick checks: all 16 OK for all three; 8 rows, d 64/128, seqlen 2k/8k, causal or
not): _tr_rs 0.84x cuDNN (geomean), _tr_rs_pf 0.82x, _tr_rs_pipe 0.80x: deferring the dQ store and
reduce-add behind the next step's S^T/dP^T, or prefetching the next step's statistics, is slower
(register pressure and the later release of the stage), so the library's fused kernel
(kernels/attn_bwd_hopper.py, attn_bwd_fused_hopper) is _tr_rs.
Run 5 (2026-11-26, --quick checks all OK; 12 rows, d 64/128, seqlen 1k/2k/8k, causal or not): a
3-stage Q/dO ring (bm64_s3_tr_rs) 0.86x cuDNN, the same as 2 stages (0.86x). Where the whole fused
backward's time goes, from the parts this script times (ms, the whole = pre-pass + dQ memset + kernel
+ cast): d128 non-causal 1k: whole 0.996, kernel 0.829 (the other three 0.167, 17%); d64 non-causal
1k: 1.268 and 1.092 (14%); d64 non-causal 8k: 7.37 and 7.27 (1.4%). The pre-pass reads O and dO, the
memset writes the fp32 dQ accumulator, the cast reads it and writes dQ: ~470 MB at 16384 tokens x 2048
columns, bound by bandwidth, so fusing the launches saves only their gaps. At 1k the kernel alone
(0.829 ms at d128) already takes cuDNN's whole backward time (0.83): the kernel's own rate has to rise.

Per kernel, d=128 non-causal 16k (ms; TFLOP/s of the kernel's own products): aotk dK/dV 8.68 (506 for
4 products), aotk dQ 5.15 (641 for 3); Gluon dK/dV alone (_rs) 7.62 (577 for 4); Gluon fused _tr_rs
11.35 (484 for 5), with per-lane atomics 14.0, with the writer warp 12.6 (run 1). The dK/dV half runs
at about the rate of FA3's whole backward (561 in its paper); adding dQ costs 3.7 ms where its matrix
product alone is worth ~1.9: the dQ path
(dS^T store and barrier, dQ to shared memory, barriers, bulk reduce of 32 KB per step, 17 GB of fp32
reductions in all at 16k) is what keeps the fused kernel under cuDNN. At d=64 the dK/dV kernel alone
reaches only 380-425: the serial exp2 / dS work of each step is as large as at d=128 while its matrix
work halves, and nothing overlaps it (FA3 uses 128-row query tiles there; here they spill).
"""

import functools
import math
import os
import sys

import triton
import triton.language as tl
from triton.experimental import gluon
from triton._C.libtriton import ir as _ir
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin as _gluon_builtin
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(HERE, "..", "..", "..", "kernels")

# Triton 3.6 calls the TMA load async_copy_global_to_shared; 3.9 renamed it async_load.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

LOG2E = 1.4426950408889634


@_gluon_builtin
def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
    # TMA reduce-add from shared memory (cp.reduce.async.bulk.tensor.add): Gluon 3.6's builder has the
    # op (ttng.async_tma_reduce) but its hopper.tma module does not export it.
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(_ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord, src.handle)


# Tile configs: BLOCK_N keys per program (2 warpgroups x 64 rows), BLOCK_M query rows per step, STAGES
# Q/dO ring depth; 8 consumer warps + 1 producer warp (12 warps once padded to warpgroups), so the
# entry cap is 65536 / 384 = 170 -> 168, and setmaxnreg gives the producer 24, the consumers 240.
CONFIGS = {
    "bm64_s2": dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, producer_regs=24, maxnreg=168),
    "bm64_s3": dict(BLOCK_M=64, BLOCK_N=128, STAGES=3, producer_regs=24, maxnreg=168),
    # Each block's dQ atomics issued in the next step, while that step's S^T and dP^T run.
    "bm64_s2_pipe": dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, PIPE=True, producer_regs=24, maxnreg=168),
    # dQ handed through shared memory to a writer warp that issues the atomics (FA3's dQ path, with
    # per-lane atomics instead of a TMA reduce-add).
    "bm64_s2_wr": dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, WRITER=True, producer_regs=32, maxnreg=168),
    # dK from registers (dS^T as the A operand): no dS^T store or barrier at all without FUSED_DQ.
    "bm64_s2_rs": dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, DK_RS=True, producer_regs=24, maxnreg=168),
    # dQ by TMA reduce-add (FA3's way), with and without dK from registers.
    "bm64_s2_tr": dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, TMA_REDUCE=True, producer_regs=24, maxnreg=168),
    "bm64_s2_tr_rs": dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, TMA_REDUCE=True, DK_RS=True, producer_regs=24,
                          maxnreg=168),
    # ... with a 3-stage Q/dO ring.
    "bm64_s3_tr_rs": dict(BLOCK_M=64, BLOCK_N=128, STAGES=3, TMA_REDUCE=True, DK_RS=True, producer_regs=24,
                          maxnreg=168),
    # ... with the dQ store and reduce-add at the top of the next step, behind its S^T and dP^T.
    "bm64_s2_tr_rs_pipe": dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, TMA_REDUCE=True, DK_RS=True, PIPE=True,
                               producer_regs=24, maxnreg=168),
    # ... with the next step's lse and delta loaded at the end of this one (off the critical path).
    "bm64_s2_tr_rs_pf": dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, TMA_REDUCE=True, DK_RS=True, PREFETCH=True,
                             producer_regs=24, maxnreg=168),
    "bm64_s2_rs_pf": dict(BLOCK_M=64, BLOCK_N=128, STAGES=2, DK_RS=True, PREFETCH=True, producer_regs=24,
                          maxnreg=168),
    # FA3's hdim-64 tile: 128 query rows per step.
    "bm128_s2": dict(BLOCK_M=128, BLOCK_N=128, STAGES=2, producer_regs=24, maxnreg=168, dims=(64, )),
}
DEFAULT_CONFIG = {64: "bm64_s2_tr_rs", 128: "bm64_s2_tr_rs"}


def smem_bytes(cfg, head_dim):
    """K + V resident, STAGES x (Q + dO), two dS^T buffers (2-byte elements); the writer's fp32 dQ."""
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    return 2 * (2 * bn * head_dim + 2 * cfg["STAGES"] * bm * head_dim + 2 * bn * bm) + 1024 + \
        (4 * bm * head_dim if cfg.get("WRITER") or cfg.get("TMA_REDUCE") else 0)


def config_ok(cfg, head_dim):
    return head_dim in cfg.get("dims", (64, 128)) and smem_bytes(cfg, head_dim) <= 232448 - 1024


# ----------------------------------------------------------------------------------------------------
# Device code
# ----------------------------------------------------------------------------------------------------


@gluon.jit
def _query_range(n0, seqlen_q, seqlen_k, CAUSAL: gl.constexpr, BLOCK_M: gl.constexpr):
    # Query blocks that see some key of [n0, n0 + BLOCK_N): all of them, or (causal, bottom-right) those
    # from the block holding row n0 - diag on.
    m_lo = n0 * 0
    if CAUSAL:
        m_lo = gl.maximum(n0 - (seqlen_k - seqlen_q), 0) // BLOCK_M * BLOCK_M
    n_m = gl.maximum(gl.cdiv(seqlen_q - m_lo, BLOCK_M), 0)
    return m_lo, n_m


@gluon.jit
def _producer(q_desc, do_desc, k_desc, v_desc, q_bufs, do_bufs, k_smem, v_smem, bars, coords, n_iters,
              BLOCK_M: gl.constexpr, STAGES: gl.constexpr):
    kv_bar, q_ready, do_ready, qdo_empty = bars
    b, n0, hkv, group_size, m_lo, n_m = coords
    mbarrier.expect(kv_bar, 2 * k_desc.block_type.nbytes)
    _tma_load(k_desc, [b, n0, hkv, 0], kv_bar, k_smem)
    _tma_load(v_desc, [b, n0, hkv, 0], kv_bar, v_smem)
    for it in range(n_iters):
        s = it % STAGES
        ph = (it // STAGES) & 1
        hq = hkv * group_size + it // n_m
        m0 = m_lo + (it % n_m) * BLOCK_M
        # A fresh mbarrier counts as having completed the phase before phase 0: parity 1 passes at once.
        # One "empty" barrier per stage: the consumer releases Q and dO together.
        mbarrier.wait(qdo_empty.index(s), ph ^ 1)
        mbarrier.expect(q_ready.index(s), q_desc.block_type.nbytes)
        _tma_load(q_desc, [b, m0, hq, 0], q_ready.index(s), q_bufs.index(s))
        mbarrier.expect(do_ready.index(s), do_desc.block_type.nbytes)
        _tma_load(do_desc, [b, m0, hq, 0], do_ready.index(s), do_bufs.index(s))


@gluon.jit
def _issue_sdp(k2, v2, q_bufs, do_bufs, q_ready, do_ready, it, zero_s, BLOCK_M: gl.constexpr,
               HEAD_DIM: gl.constexpr, STAGES: gl.constexpr):
    # S^T = K Q^T and dP^T = V dO^T of step `it`, asynchronous (two wgmma groups, S^T first).
    s = it % STAGES
    ph = (it // STAGES) & 1
    q2 = q_bufs.index(s).reshape([BLOCK_M, HEAD_DIM])
    do2 = do_bufs.index(s).reshape([BLOCK_M, HEAD_DIM])
    mbarrier.wait(q_ready.index(s), ph)
    st_tok = warpgroup_mma(k2, q2.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    mbarrier.wait(do_ready.index(s), ph)
    dpt_tok = warpgroup_mma(v2, do2.permute((1, 0)), zero_s, use_acc=False, is_async=True)
    return st_tok, dpt_tok


@gluon.jit
def _reduce_dq(dq, dq_handoff, row, m0, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr):
    # dQ block -> shared memory -> one TMA reduce-add into the fp32 accumulator (rows `row`, from m0).
    dq_smem, dq_desc = dq_handoff
    dq_smem.reshape([BLOCK_M, HEAD_DIM]).store(dq)
    fence_async_shared()
    gl.thread_barrier()
    _tma_reduce_add(dq_desc, [row, m0, 0], dq_smem)


@gluon.jit
def _load_stats(LseLog2, Delta, i, b, hkv, group_size, m_lo, n_m, heads_q, stats_stride, cols0,
                BLOCK_M: gl.constexpr):
    # lse * log2(e) and delta of step i's query rows (staged, padded to stats_stride: no mask).
    hq = hkv * group_size + i // n_m
    m0 = m_lo + (i % n_m) * BLOCK_M
    stats_row = (b * heads_q + hq).to(gl.int64) * stats_stride
    cols = m0 + cols0
    return gl.load(LseLog2 + stats_row + cols), gl.load(Delta + stats_row + cols)


@gluon.jit
def _step(it, n_iters, lse, delta, dk, dv, dq_prev, dq_base_prev, dq_handoff, k2, v2, q_bufs, do_bufs, ds_bufs,
          q_ready, do_ready, qdo_empty, zero_s,
          zero_dq, keys, cols0, dq_offs, b, n0, hkv, group_size, m_lo, n_m, LseLog2, Delta, DQAcc,
          seqlen_k, diag, heads_q, stats_stride, softmax_scale, qk_scale_log2, p_layout: gl.constexpr,
          CAUSAL: gl.constexpr, FUSED_DQ: gl.constexpr, PIPE: gl.constexpr, WRITER: gl.constexpr,
          DK_RS: gl.constexpr, TMA_REDUCE: gl.constexpr, PREFETCH: gl.constexpr,
          BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr):
    # One query block. PIPE (FUSED_DQ): the previous block's dQ atomics are issued here, while this
    # block's S^T and dP^T run on the tensor cores, instead of after this block's last wait. (Carrying
    # an in-flight wgmma across the loop's back edge instead makes ptxas serialize every wgmma,
    # warning C7514: the loop's phi copies read the accumulator registers.)
    dtype: gl.constexpr = q_bufs.dtype
    s = it % STAGES
    hq = hkv * group_size + it // n_m
    m0 = m_lo + (it % n_m) * BLOCK_M
    q2 = q_bufs.index(s).reshape([BLOCK_M, HEAD_DIM])
    do2 = do_bufs.index(s).reshape([BLOCK_M, HEAD_DIM])
    st_tok, dpt_tok = _issue_sdp(k2, v2, q_bufs, do_bufs, q_ready, do_ready, it, zero_s, BLOCK_M, HEAD_DIM, STAGES)

    # The previous block's dQ first (it dies before lse and delta are live: no spills at d=128).
    if FUSED_DQ and PIPE:
        if it > 0:
            if TMA_REDUCE:
                _reduce_dq(dq_prev, dq_handoff, b * heads_q + hkv * group_size + (it - 1) // n_m,
                           m_lo + ((it - 1) % n_m) * BLOCK_M, BLOCK_M, HEAD_DIM)
            else:
                gl.atomic_add(dq_base_prev + dq_offs, dq_prev, sem="relaxed")
    cols = m0 + cols0
    if not PREFETCH:
        # Row statistics of these query rows, while the products run (PREFETCH: loaded by the last step).
        lse, delta = _load_stats(LseLog2, Delta, it, b, hkv, group_size, m_lo, n_m, heads_q, stats_stride, cols0,
                                 BLOCK_M)

    st = warpgroup_mma_wait(1, deps=(st_tok, ))
    pt = gl.exp2(st * qk_scale_log2 - gl.expand_dims(lse, 0))
    # Mask only where needed: keys past seqlen_k (TMA zero-fills K, so exp2(0 - lse) would not be 0)
    # and, causal, blocks that reach above the diagonal. Rows past seqlen_q have lse = +inf.
    need_mask = n0 + BLOCK_N > seqlen_k
    if CAUSAL:
        need_mask = need_mask | (n0 + BLOCK_N - 1 > m0 + diag)
    if need_mask:
        ok = gl.expand_dims(keys, 1) < seqlen_k
        if CAUSAL:
            ok = ok & (gl.expand_dims(keys, 1) <= gl.expand_dims(cols + diag, 0))
        pt = gl.where(ok, pt, 0.0)
    pt_op = gl.convert_layout(pt.to(dtype), p_layout)
    dpt = warpgroup_mma_wait(0, deps=(dpt_tok, ))
    dv_tok = warpgroup_mma(pt_op, do2, dv, is_async=True)
    dst = pt * (dpt - gl.expand_dims(delta, 0))
    ds = ds_bufs.index(it % 2)
    if DK_RS:
        # dK += dS^T Q with dS^T from registers (as dV's P^T): 16 KB less shared-memory traffic per
        # step, and issued before dS^T is stored (without FUSED_DQ it is not stored at all).
        ds_op = gl.convert_layout(dst.to(dtype), p_layout)
        dk_tok = warpgroup_mma(ds_op, q2, dk, is_async=True)
    if FUSED_DQ:
        if TMA_REDUCE:
            # The previous step's reduce-add has read its buffer (the barrier below tells every thread).
            tma.store_wait(0)
        # dS^T to shared memory (two buffers: the barrier of step it + 1 orders this step's readers of
        # buffer it % 2 before step it + 2 overwrites it), fenced for the async proxy (wgmma reads it).
        ds.store(dst.to(dtype))
        fence_async_shared()
        gl.thread_barrier()
    elif not DK_RS:
        ds.store(dst.to(dtype))
        fence_async_shared()
        gl.thread_barrier()
    if not DK_RS:
        dk_tok = warpgroup_mma(ds, q2, dk, is_async=True)
    dq = dq_prev
    dq_base = DQAcc + ((b * heads_q + hq).to(gl.int64) * stats_stride + m0) * HEAD_DIM
    if FUSED_DQ:
        dq_tok = warpgroup_mma(ds.permute((1, 0)), k2, zero_dq, use_acc=False, is_async=True)
        if DK_RS:
            dv, dk, dq, pt_op, ds_op = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok, dq_tok, pt_op, ds_op))
        else:
            dv, dk, dq, pt_op = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok, dq_tok, pt_op))
        # Scaled here: the loop then carries the product, not registers a wgmma wrote (ptxas would
        # inject a wgmma wait before the next step's atomics read them, warning C7517).
        dq = dq * softmax_scale
    else:
        if DK_RS:
            dv, dk, pt_op, ds_op = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok, pt_op, ds_op))
        else:
            dv, dk, pt_op = warpgroup_mma_wait(0, deps=(dv_tok, dk_tok, pt_op))
    if FUSED_DQ and TMA_REDUCE and not PIPE:
        # FA3's dQ path: the block goes to shared memory and one bulk reduce-add (cp.reduce.async.bulk
        # .tensor) adds it into the fp32 accumulator; the wait is at the next step's dS^T store. The
        # stage's release (a barrier of the consumer warps, then one arrival) also orders every
        # thread's dQ stores before the reduce is issued. (PIPE: at the top of the next step.)
        dq_smem, dq_desc = dq_handoff
        dq_smem.reshape([BLOCK_M, HEAD_DIM]).store(dq)
        fence_async_shared()
        mbarrier.arrive(qdo_empty.index(s))
        _tma_reduce_add(dq_desc, [b * heads_q + hq, m0, 0], dq_smem)
    else:
        mbarrier.arrive(qdo_empty.index(s))
    if FUSED_DQ and TMA_REDUCE:
        pass
    elif FUSED_DQ and WRITER:
        # Hand dQ to the writer warp through shared memory (one buffer: wait until it has read the last).
        dq_smem, dq_full, dq_empty = dq_handoff
        mbarrier.wait(dq_empty, (it & 1) ^ 1)
        dq_smem.store(dq)
        mbarrier.arrive(dq_full)
    elif FUSED_DQ and not PIPE:
        gl.atomic_add(dq_base + dq_offs, dq, sem="relaxed")
    if PREFETCH:
        # The next step's statistics now, while registers are free (the last step reloads its own).
        lse, delta = _load_stats(LseLog2, Delta, gl.minimum(it + 1, n_iters - 1), b, hkv, group_size, m_lo, n_m,
                                 heads_q, stats_stride, cols0, BLOCK_M)
    return lse, delta, dk, dv, dq, dq_base


@gluon.jit
def _dq_writer(dq_handoff, coords, n_iters, DQAcc, heads_q, stats_stride, BLOCK_M: gl.constexpr,
               HEAD_DIM: gl.constexpr):
    # One warp: reads each block's dQ from shared memory a few rows at a time (4 consecutive floats per
    # lane) and adds it into the fp32 accumulator with relaxed atomics, so that the consumer warps
    # never wait on the atomics (FA3 does this with a TMA reduce-add, which Gluon 3.6 does not expose).
    dq_smem, dq_full, dq_empty = dq_handoff
    b, n0, hkv, group_size, m_lo, n_m = coords
    ROWS: gl.constexpr = 8
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [128 // HEAD_DIM, 32 * HEAD_DIM // 128], [1, 1], [1, 0])
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, layout))
    offs = gl.expand_dims(rows * HEAD_DIM, 1) + gl.expand_dims(cols, 0)
    for it in range(n_iters):
        hq = hkv * group_size + it // n_m
        m0 = m_lo + (it % n_m) * BLOCK_M
        base = DQAcc + ((b * heads_q + hq).to(gl.int64) * stats_stride + m0) * HEAD_DIM
        mbarrier.wait(dq_full, it & 1)
        for r in gl.static_range(0, BLOCK_M, ROWS):
            x = dq_smem.slice(r, ROWS, dim=0).load(layout)
            gl.atomic_add(base + r * HEAD_DIM + offs, x, sem="relaxed")
        mbarrier.arrive(dq_empty)


@gluon.jit
def _consumer(q_bufs, do_bufs, k_smem, v_smem, ds_bufs, dq_handoff, bars, coords, n_iters, LseLog2, Delta, DQAcc, DK,
              DV, stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
              seqlen_q, seqlen_k, heads_q, stats_stride, softmax_scale, qk_scale_log2,
              CAUSAL: gl.constexpr, FUSED_DQ: gl.constexpr, PIPE: gl.constexpr, WRITER: gl.constexpr,
              DK_RS: gl.constexpr, TMA_REDUCE: gl.constexpr, PREFETCH: gl.constexpr, BLOCK_M: gl.constexpr,
              BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, STAGES: gl.constexpr):
    kv_bar, q_ready, do_ready, qdo_empty = bars
    b, n0, hkv, group_size, m_lo, n_m = coords
    dtype: gl.constexpr = q_bufs.dtype
    NUM_WARPS: gl.constexpr = 8
    # Key rows are the M side: [BLOCK_N, BLOCK_M] scores, [BLOCK_N, HEAD_DIM] dK / dV, one m16 slice per warp.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                       instr_shape=[16, BLOCK_M, 16])
    kv_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=kv_layout, k_width=2)
    # dQ [BLOCK_M, HEAD_DIM]: with 64 query rows the two warpgroups split it along d.
    if BLOCK_M == 64:
        dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                            instr_shape=[16, HEAD_DIM // 2, 16])
    else:
        dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NUM_WARPS, 1],
                                                            instr_shape=[16, HEAD_DIM, 16])

    diag = seqlen_k - seqlen_q
    keys = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
    cols0 = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    k2 = k_smem.reshape([BLOCK_N, HEAD_DIM])
    v2 = v_smem.reshape([BLOCK_N, HEAD_DIM])
    zero_s = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, s_layout)
    zero_dq = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, dq_layout)
    dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, kv_layout)
    dq_rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dq_layout))
    dq_cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, dq_layout))
    dq_offs = gl.expand_dims(dq_rows * HEAD_DIM, 1) + gl.expand_dims(dq_cols, 0)
    dq = zero_dq
    dq_base = DQAcc

    mbarrier.wait(kv_bar, 0)
    lse = gl.zeros([BLOCK_M], gl.float32, gl.SliceLayout(0, s_layout))
    delta = lse
    if PREFETCH:
        if n_iters > 0:
            lse, delta = _load_stats(LseLog2, Delta, 0, b, hkv, group_size, m_lo, n_m, heads_q, stats_stride, cols0,
                                     BLOCK_M)
    for it in range(n_iters):
        lse, delta, dk, dv, dq, dq_base = _step(it, n_iters, lse, delta, dk, dv, dq, dq_base, dq_handoff, k2, v2,
                                                q_bufs, do_bufs, ds_bufs, q_ready, do_ready,
                                    qdo_empty, zero_s, zero_dq, keys, cols0, dq_offs, b, n0, hkv, group_size, m_lo,
                                    n_m, LseLog2, Delta, DQAcc, seqlen_k, diag, heads_q, stats_stride, softmax_scale,
                                    qk_scale_log2,
                                    p_layout, CAUSAL, FUSED_DQ, PIPE, WRITER, DK_RS, TMA_REDUCE, PREFETCH, BLOCK_M,
                                    BLOCK_N, HEAD_DIM, STAGES)
    if FUSED_DQ and PIPE:
        if n_iters > 0:
            if TMA_REDUCE:
                _reduce_dq(dq, dq_handoff, b * heads_q + hkv * group_size + (n_iters - 1) // n_m,
                           m_lo + ((n_iters - 1) % n_m) * BLOCK_M, BLOCK_M, HEAD_DIM)
            else:
                gl.atomic_add(dq_base + dq_offs, dq, sem="relaxed")
    if FUSED_DQ and TMA_REDUCE:
        tma.store_wait(0)  # the last reduce-add has read shared memory before the program exits

    # dK and dV, written once (rows past seqlen_k are not).
    rows_o = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, kv_layout))
    cols_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, kv_layout))
    o_mask = gl.expand_dims(rows_o < seqlen_k, 1) & gl.expand_dims(cols_o < HEAD_DIM, 0)
    rows64 = gl.expand_dims(rows_o.to(gl.int64), 1)
    dk_ptrs = DK + b.to(gl.int64) * stride_dkb + hkv.to(gl.int64) * stride_dkh + rows64 * stride_dks + \
        gl.expand_dims(cols_o, 0)
    gl.store(dk_ptrs, (dk * softmax_scale).to(dtype), mask=o_mask)
    dv_ptrs = DV + b.to(gl.int64) * stride_dvb + hkv.to(gl.int64) * stride_dvh + rows64 * stride_dvs + \
        gl.expand_dims(cols_o, 0)
    gl.store(dv_ptrs, dv.to(dtype), mask=o_mask)


@gluon.jit(do_not_specialize=["seqlen_q", "seqlen_k", "heads_q", "heads_kv", "group_size", "num_n_blocks",
                              "stats_stride"])
def gluon_attn_bwd_dkdv_kernel(q_desc, k_desc, v_desc, do_desc, dq_desc, LseLog2, Delta, DQAcc, DK, DV,
                               stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
                               seqlen_q, seqlen_k, heads_q, heads_kv, group_size, num_n_blocks, stats_stride,
                               softmax_scale, qk_scale_log2,
                               CAUSAL: gl.constexpr, FUSED_DQ: gl.constexpr, PIPE: gl.constexpr,
                               WRITER: gl.constexpr, DK_RS: gl.constexpr, TMA_REDUCE: gl.constexpr,
                               PREFETCH: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                               HEAD_DIM: gl.constexpr,
                               STAGES: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    # Grid: one program per (key block, batch, kv head), key block fastest (programs in flight share one
    # head's Q and dO in L2); under a causal mask the first key blocks have the most query blocks, so the
    # heaviest programs start first.
    pid = gl.program_id(0)
    bh = pid // num_n_blocks
    n_block = pid % num_n_blocks
    b = bh // heads_kv
    hkv = bh % heads_kv
    n0 = n_block * BLOCK_N
    m_lo, n_m = _query_range(n0, seqlen_q, seqlen_k, CAUSAL, BLOCK_M)
    n_iters = n_m * group_size

    dtype: gl.constexpr = q_desc.dtype
    q_bufs = gl.allocate_shared_memory(dtype, [STAGES] + q_desc.block_type.shape, q_desc.layout)
    do_bufs = gl.allocate_shared_memory(dtype, [STAGES] + do_desc.block_type.shape, do_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, k_desc.block_type.shape, k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, v_desc.block_type.shape, v_desc.layout)
    ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], dtype)
    ds_bufs = gl.allocate_shared_memory(dtype, [2, BLOCK_N, BLOCK_M], ds_layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    do_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    qdo_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(do_ready.index(i), count=1)
        mbarrier.init(qdo_empty.index(i), count=1)

    if WRITER:
        # Swizzled over 8 rows (2-float vectors): the consumer's 8-byte stores (8 rows x 4 column pairs
        # per warp) do not pile onto one bank; the writer reads whole 8-row swizzle periods (Gluon 3.6
        # refuses to slice inside one).
        dq_layout_smem: gl.constexpr = gl.SwizzledSharedLayout(vec=2, per_phase=1, max_phase=8, order=[1, 0])
        dq_smem = gl.allocate_shared_memory(gl.float32, [BLOCK_M, HEAD_DIM], dq_layout_smem)
        dq_full = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        dq_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        mbarrier.init(dq_full, count=1)
        mbarrier.init(dq_empty, count=1)
        dq_handoff = (dq_smem, dq_full, dq_empty)
    elif TMA_REDUCE:
        dq_handoff = (gl.allocate_shared_memory(gl.float32, dq_desc.block_type.shape, dq_desc.layout), dq_desc)
    else:
        dq_handoff = (kv_bar, kv_bar, kv_bar)  # unused
    bars = (kv_bar, q_ready, do_ready, qdo_empty)
    coords = (b, n0, hkv, group_size, m_lo, n_m)
    # (The argument tuples are written out in each call: a tuple held in a variable loses its constexprs.)
    if WRITER:
        gl.warp_specialize([
            (_consumer, (q_bufs, do_bufs, k_smem, v_smem, ds_bufs, dq_handoff, bars, coords, n_iters, LseLog2, Delta,
                         DQAcc, DK, DV, stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
                         seqlen_q, seqlen_k, heads_q, stats_stride, softmax_scale, qk_scale_log2,
                         CAUSAL, FUSED_DQ, PIPE, WRITER, DK_RS, TMA_REDUCE, PREFETCH, BLOCK_M, BLOCK_N,
                         HEAD_DIM, STAGES)),
            (_producer, (q_desc, do_desc, k_desc, v_desc, q_bufs, do_bufs, k_smem, v_smem, bars, coords, n_iters,
                         BLOCK_M, STAGES)),
            (_dq_writer, (dq_handoff, coords, n_iters, DQAcc, heads_q, stats_stride, BLOCK_M, HEAD_DIM)),
        ], [1, 1], [PRODUCER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_consumer, (q_bufs, do_bufs, k_smem, v_smem, ds_bufs, dq_handoff, bars, coords, n_iters, LseLog2, Delta,
                         DQAcc, DK, DV, stride_dkb, stride_dks, stride_dkh, stride_dvb, stride_dvs, stride_dvh,
                         seqlen_q, seqlen_k, heads_q, stats_stride, softmax_scale, qk_scale_log2,
                         CAUSAL, FUSED_DQ, PIPE, WRITER, DK_RS, TMA_REDUCE, PREFETCH, BLOCK_M, BLOCK_N,
                         HEAD_DIM, STAGES)),
            (_producer, (q_desc, do_desc, k_desc, v_desc, q_bufs, do_bufs, k_smem, v_smem, bars, coords, n_iters,
                         BLOCK_M, STAGES)),
        ], [1], [PRODUCER_REGS])


@triton.jit
def dq_convert_kernel(DQAcc, DQ, stride_qb, stride_qs, stride_qh, seqlen_q, heads_q, stats_stride, num_m_blocks,
                      softmax_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    # dq[b, i, h, :] = softmax_scale * acc[b * heads_q + h, i, :], rows < seqlen_q (the Gluon kernel
    # already scaled what it added: it passes softmax_scale = 1).
    pid = tl.program_id(0)
    bh = pid // num_m_blocks
    rows = (pid % num_m_blocks) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, HEAD_DIM)
    acc = tl.load(DQAcc + (bh.to(tl.int64) * stats_stride + rows[:, None]) * HEAD_DIM + cols[None, :])
    b = bh // heads_q
    h = bh % heads_q
    ptrs = DQ + b.to(tl.int64) * stride_qb + h * stride_qh + rows[:, None].to(tl.int64) * stride_qs + cols[None, :]
    tl.store(ptrs, (acc * softmax_scale).to(DQ.dtype.element_ty), mask=rows[:, None] < seqlen_q)
