"""Experimental FlashAttention-3-style backward for the H100 (sm_90a), written in Gluon (Triton 3.6.0).

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
