"""The selection ops "sel_fwd" and "sel_bwd": selection attention against dense causal attention."""
import ctypes
import math
import os
import random
import sys
import traceback

from . import common
from .common import (AOTK_OP_SEL_BWD, AOTK_OP_SEL_FWD, AotkError, AotkSelParams, _sdpa_backend, current_stream,
                     describe_tensor, empty_cache, loud, note, rel_l2, sdpa_anchor_times, synchronize, time_ms, torch)
from .features import BWD_ERR_FACTOR, FWD_ERR_FACTOR, LSE_FLOOR, bf16_rounding_floor, compare_to_reference

# ---------------------------------------------------------------------------------------------------
# ops "sel_fwd" and "sel_bwd": selection attention (NSA's selected-blocks branch) against dense causal
# attention on the same q, k, v
# ---------------------------------------------------------------------------------------------------
#
# One sequence of N tokens per row (batch 1), bf16, q [N, 64, 128], k and v [N, 4, 128] (aotk.h's packed
# layout, no cu_seqlens), key blocks of 64, 16 slots. Indices as in the public NSA benchmarks: for each
# token t and kv head h, min(16, t // 64 + 1) distinct blocks drawn uniformly among the causal ones
# 0 .. t // 64, the other slots -1, all 16 slots in random order (so -1 slots sit between valid ones:
# aotk.h reads every slot). aotk's time is compared with SDPA's flash (FlashAttention-2) and cuDNN
# backends doing dense causal attention on the same q, k, v: what selection attention replaces.
# seqlen_q = seqlen_k, so SDPA's top-left is_causal is the same mask as aotk.h's bottom-right.

SEL_OPS = ("sel_fwd", "sel_bwd")
SEL_SEQLENS = [8192, 16384, 32768, 65536]
SEL_SEQLENS_QUICK = [8192, 16384]
SEL_HEADS_Q = 64
SEL_HEADS_KV = 4
SEL_HEAD_DIM = 128
SEL_BLOCK_SIZE = 64
SEL_SLOTS = 16
SEL_INDEX_SEED = 20250  # + the row's token count: each size has its own fixed draw
SEL_INDEX_DISTRIBUTION = "uniform-causal"  # issue 5's draw; its bars are defined on it
# Issue 12's distributions, the selections NSA really makes (each row records its `index_distribution`):
#   uniform-causal  min(16, t / 64 + 1) distinct causal blocks, uniformly at random (sel_block_indices);
#   nsa-fixed       the first block and the two local blocks (the token's own and the one before) always,
#                   then distinct causal blocks uniformly at random up to the slots (NSA's fixed picks);
#   nsa-topk        block 0, then 15 distinct blocks uniformly over ALL blocks (the top 16 of random scores
#                   with block 0 forced), future blocks dropped to -1: about half the slots valid (the
#                   public NSA Triton repository's own benchmark).
SEL_INDEX_DISTRIBUTIONS = ("uniform-causal", "nsa-fixed", "nsa-topk")
SEL_INDEX_CHUNK_TOKENS = 4096  # the draw's scores are [chunk, heads_kv, num_blocks] fp32: 64 MiB at 64k
# The bars, aotk's speedup over sdpa-flash (dense causal FlashAttention-2) on the same q, k, v:
# (op, tokens) -> (speedup, strict). 64k: the public selection kernel's figures (anchors.md); 16k: faster.
SEL_BARS = {("sel_fwd", 65536): (7.6, False), ("sel_bwd", 65536): (16.0, False),
            ("sel_fwd", 16384): (1.0, True), ("sel_bwd", 16384): (1.0, True)}
SEL_ANCHORS = [("sdpa-flash", _sdpa_backend("FLASH_ATTENTION")), ("sdpa-cudnn", _sdpa_backend("CUDNN_ATTENTION"))]
SEL_IMPLS = ["aotk"] + [name for name, _ in SEL_ANCHORS]
# The checks, before anything is timed: every token of a problem of SEL_FULL_CHECK_TOKENS tokens (the
# row's heads, head dim, block size and slots; all of out and lse, or dq, dk and dv) against a masked dense
# reference, chunked by SEL_REFERENCE_CHUNK queries; then, on the row's own tensors, SEL_SAMPLE_TOKENS
# tokens (every head) against a reference that gathers each token's selected key rows.
SEL_FULL_CHECK_TOKENS = 4096
SEL_REFERENCE_CHUNK = 256
SEL_SAMPLE_TOKENS = 64
SEL_SAMPLE_SEED = 7


SEL_OPTIONS = {"distributions": list(SEL_INDEX_DISTRIBUTIONS)}  # --sel-distributions


def sel_cases(op, quick):
    for dist in SEL_OPTIONS["distributions"]:
        for n in (SEL_SEQLENS_QUICK if quick else SEL_SEQLENS):
            yield {"op": op, "dtype": "bf16", "seqlen": n, "heads_q": SEL_HEADS_Q, "heads_kv": SEL_HEADS_KV,
                   "head_dim": SEL_HEAD_DIM, "block_size": SEL_BLOCK_SIZE, "slots": SEL_SLOTS,
                   "index_distribution": dist}


def sel_label(case):
    return (f"{case['op']} {case['dtype']} tokens={case['seqlen']} heads_q={case['heads_q']} "
            f"heads_kv={case['heads_kv']} d={case['head_dim']} block={case['block_size']} slots={case['slots']} "
            f"indices={case.get('index_distribution', SEL_INDEX_DISTRIBUTION)}")


def sel_num_blocks(seqlen_k, block_size):
    return -(-seqlen_k // block_size)


def sel_key_positions(blocks, position, block_size, seqlen_k):
    """J(t, h) by aotk.h's rule, as a list of key positions in slot order: each listed block b with
    0 <= b < ceil(seqlen_k / block_size) and b * block_size <= position, cut at position (and seqlen_k).
    Slots outside that (-1, out of range, after the diagonal) are skipped; a block listed twice counts twice."""
    keys = []
    for b in blocks:
        if 0 <= b < sel_num_blocks(seqlen_k, block_size) and b * block_size <= position:
            keys.extend(range(b * block_size, min((b + 1) * block_size, position + 1, seqlen_k)))
    return keys


def sel_brute_force_key_count(blocks, position, block_size, seqlen_k):
    """|J(t, h)| by testing every key position against the rule as aotk.h words it (self-check only)."""
    n = 0
    for j in range(seqlen_k):
        if j <= position:
            n += sum(1 for b in blocks if 0 <= b and b * block_size <= position and j // block_size == b)
    return n


def sel_expected_keys(seqlen, block_size, slots):
    """E[sum over tokens of |J(t, h)|] for one kv head under SEL_INDEX_DISTRIBUTION, seqlen_q = seqlen_k:
    token t has n = t // block_size + 1 causal blocks; with n <= slots it sees all t + 1 keys; otherwise
    each block is chosen with probability slots / n, the n - 1 full ones bringing block_size keys and the
    diagonal one t % block_size + 1."""
    total = 0.0
    for t in range(seqlen):
        n = t // block_size + 1
        if n <= slots:
            total += t + 1
        else:
            total += slots / n * ((n - 1) * block_size + t % block_size + 1)
    return total


def sel_block_indices(seqlen, heads_kv, slots, block_size, seed, device):
    """block_idx int32 [seqlen, heads_kv, slots] of SEL_INDEX_DISTRIBUTION, drawn on `device` with a
    generator seeded by `seed`: per (token, kv head) the top-min(slots, causal blocks) of uniform scores
    over the causal blocks (a uniformly random subset), padded with -1, then the slots shuffled. Chunked
    over tokens so the scores stay SEL_INDEX_CHUNK_TOKENS x heads_kv x num_blocks."""
    num_blocks = sel_num_blocks(seqlen, block_size)
    picks = min(slots, num_blocks)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    idx = torch.empty(seqlen, heads_kv, slots, dtype=torch.int32, device=device)
    blocks = torch.arange(num_blocks, device=device)
    for t0 in range(0, seqlen, SEL_INDEX_CHUNK_TOKENS):
        t1 = min(seqlen, t0 + SEL_INDEX_CHUNK_TOKENS)
        last_causal = torch.arange(t0, t1, device=device) // block_size
        score = torch.rand(t1 - t0, heads_kv, num_blocks, generator=gen, device=device)
        score.masked_fill_((blocks[None, :] > last_causal[:, None])[:, None, :], -1.0)  # rand is in [0, 1)
        top_score, top_block = score.topk(picks, dim=-1)
        chosen = torch.where(top_score >= 0, top_block, torch.full_like(top_block, -1))
        if picks < slots:
            chosen = torch.cat([chosen, chosen.new_full((t1 - t0, heads_kv, slots - picks), -1)], dim=-1)
        order = torch.rand(t1 - t0, heads_kv, slots, generator=gen, device=device).argsort(dim=-1)
        idx[t0:t1] = chosen.gather(-1, order).to(torch.int32)
    return idx


def sel_nsa_block_rows(distribution, seqlen, heads_kv, slots, block_size, seed):
    """block_idx of an NSA distribution (SEL_INDEX_DISTRIBUTIONS) as nested lists [seqlen][heads_kv][slots],
    -1 for an empty slot, drawn with Python's Mersenne Twister seeded by `seed` (the same on every machine,
    no torch: the self-check runs it). Both sort a row's blocks ascending with the -1 slots last, as the
    public repository's benchmark does (torch.sort of its top-k). nsa-fixed: block 0, the token's own
    block and the one before (distinct, causal), then distinct causal blocks uniformly at random up to the
    slots. nsa-topk, that benchmark's draw: `slots` distinct blocks uniformly over all of the sequence's
    blocks (the top-k of random scores), sorted, the first replaced by block 0, and each one after the
    token's own block replaced by -1."""
    if distribution not in ("nsa-fixed", "nsa-topk"):
        raise ValueError(f"unknown NSA index distribution {distribution!r}")
    rng = random.Random(seed)
    num_blocks = sel_num_blocks(seqlen, block_size)
    rows = []
    for t in range(seqlen):
        own = t // block_size
        heads = []
        for _ in range(heads_kv):
            if distribution == "nsa-fixed":
                fixed = {b for b in (0, own, own - 1) if b >= 0}
                rest = range(1, max(1, own - 1))  # the causal blocks not fixed
                picks = sorted(fixed | set(rng.sample(rest, min(len(rest), slots - len(fixed)))))
            else:
                picks = sorted(rng.sample(range(num_blocks), min(num_blocks, slots)))
                picks[0] = 0
                picks = [b for b in picks if b <= own]
            heads.append(picks + [-1] * (slots - len(picks)))
        rows.append(heads)
    return rows


def sel_nsa_distribution_problems():
    """Self-check of sel_nsa_block_rows (no torch): what each NSA distribution promises, on 2048 tokens
    (32 blocks of 64) and heads_kv 2; and that sel_cases gives every distribution its rows."""
    problems = []
    n, h, s, bs = 2048, 2, SEL_SLOTS, SEL_BLOCK_SIZE
    nb = sel_num_blocks(n, bs)
    fixed = sel_nsa_block_rows("nsa-fixed", n, h, s, bs, 11)
    topk = sel_nsa_block_rows("nsa-topk", n, h, s, bs, 11)
    if (fixed != sel_nsa_block_rows("nsa-fixed", n, h, s, bs, 11)
            or topk != sel_nsa_block_rows("nsa-topk", n, h, s, bs, 11)):
        problems.append("not repeatable")
    if fixed == sel_nsa_block_rows("nsa-fixed", n, h, s, bs, 12):
        problems.append("nsa-fixed ignores its seed")
    valid_topk = 0
    for t in range(n):
        own = t // bs
        for hh in range(h):
            f, k = fixed[t][hh], topk[t][hh]
            if len(f) != s or len(k) != s:
                problems.append(f"({t}, {hh}): not {s} slots")
                return problems
            fv = [b for b in f if b >= 0]
            want = min(s, own + 1)
            if len(fv) != want or len(set(fv)) != len(fv) or any(b > own for b in fv):
                problems.append(f"nsa-fixed ({t}, {hh}): {f} is not {want} distinct causal blocks")
                return problems
            must = {b for b in (0, own, own - 1) if b >= 0}
            if not must <= set(fv) or fv != sorted(fv):
                problems.append(f"nsa-fixed ({t}, {hh}): {f} lacks the fixed blocks {sorted(must)} or is not sorted")
                return problems
            if f[len(fv):] != [-1] * (s - len(fv)):
                problems.append(f"nsa-fixed ({t}, {hh}): -1 slots before valid ones")
                return problems
            kv = [b for b in k if b >= 0]
            if (k[0] != 0 or len(set(kv)) != len(kv) or any(b > own for b in kv) or any(b >= nb for b in kv)
                    or kv != sorted(kv) or k[len(kv):] != [-1] * (s - len(kv))):
                problems.append(f"nsa-topk ({t}, {hh}): {k}")
                return problems
            valid_topk += len(kv)
    # 16 of the 32 blocks (block 0 forced): at token t about 1 + 15 * own / 31 valid, ~8.3 on average here.
    mean = valid_topk / (n * h)
    if not 7.5 < mean < 9.0:
        problems.append(f"nsa-topk: {mean:.2f} valid slots per row, expected about 8.3")
    cases = list(sel_cases("sel_fwd", True))
    if sorted({c["index_distribution"] for c in cases}) != sorted(SEL_INDEX_DISTRIBUTIONS):
        problems.append("sel_cases does not give every distribution its rows")
    return problems


def sel_block_indices_for(case, seed, device):
    """block_idx int32 [seqlen, heads_kv, slots] of the case's index_distribution."""
    dist = case.get("index_distribution", SEL_INDEX_DISTRIBUTION)
    n, hkv, slots, bs = case["seqlen"], case["heads_kv"], case["slots"], case["block_size"]
    if dist == "uniform-causal":
        return sel_block_indices(n, hkv, slots, bs, seed, device)
    return torch.tensor(sel_nsa_block_rows(dist, n, hkv, slots, bs, seed), dtype=torch.int32, device=device)


def sel_valid_slots(idx, positions, block_size, seqlen_k):
    """Which slots of idx [c, H, S] (int64) count for tokens at key positions [c]: aotk.h's B(t, h)."""
    return (idx >= 0) & (idx < sel_num_blocks(seqlen_k, block_size)) & (idx * block_size <= positions[:, None, None])


def sel_selected_keys(block_idx, block_size, seqlen_k):
    """|J(t, h)| int64 [seqlen_q, heads_kv] from block_idx (one sequence, bottom-right aligned)."""
    seqlen_q = block_idx.shape[0]
    counts = torch.empty(block_idx.shape[:2], dtype=torch.int64, device=block_idx.device)
    for t0 in range(0, seqlen_q, SEL_INDEX_CHUNK_TOKENS):
        t1 = min(seqlen_q, t0 + SEL_INDEX_CHUNK_TOKENS)
        b = block_idx[t0:t1].long()
        p = torch.arange(t0, t1, device=b.device) + (seqlen_k - seqlen_q)
        hi = torch.clamp(torch.minimum((b + 1) * block_size, p[:, None, None] + 1), max=seqlen_k)
        keys = (hi - b * block_size).clamp(min=0) * sel_valid_slots(b, p, block_size, seqlen_k)
        counts[t0:t1] = keys.sum(-1)
    return counts


def sel_sample_tokens(seqlen, block_size, count, seed):
    """count tokens spread over the sequence: the edges (0, 1, the last of the first block, the first of
    the second, the last token) and one random token in each of the remaining equal strata."""
    rng = random.Random(seed + seqlen)
    edges = sorted({t for t in (0, 1, block_size - 1, block_size, seqlen - 1) if 0 <= t < seqlen})
    strata = max(1, count - len(edges))
    picks = [rng.randrange(i * seqlen // strata, max(i * seqlen // strata + 1, (i + 1) * seqlen // strata))
             for i in range(strata)]
    return sorted(set(edges + [t for t in picks if t < seqlen]))


def sel_tensors(case, backward):
    """A row's inputs and outputs in aotk.h's packed layout, one sequence of case['seqlen'] tokens."""
    n, hq, hkv, d = case["seqlen"], case["heads_q"], case["heads_kv"], case["head_dim"]
    dt = torch.bfloat16
    t = {"q": torch.randn(n, hq, d, device=common.DEVICE, dtype=dt),
         "k": torch.randn(n, hkv, d, device=common.DEVICE, dtype=dt),
         "v": torch.randn(n, hkv, d, device=common.DEVICE, dtype=dt),
         "out": torch.empty(n, hq, d, device=common.DEVICE, dtype=dt),
         "lse": torch.empty(n, hq, device=common.DEVICE, dtype=torch.float32),
         "block_idx": sel_block_indices_for(case, SEL_INDEX_SEED + n, common.DEVICE)}
    if backward:
        t["dout"] = torch.randn_like(t["out"])
        for name in ("q", "k", "v"):
            t["d" + name] = torch.empty_like(t[name])
    return t


def sel_params(case, t):
    """aotk_sel_params for the row's tensors t (the backward's fields where t has them). No cu_seqlens:
    q and k form one sequence; block_cnt absent: every slot is read."""
    p = AotkSelParams()
    p.struct_size = ctypes.sizeof(AotkSelParams)
    for name in ("q", "k", "v", "out", "lse", "block_idx", "dout", "dq", "dk", "dv"):
        if name in t:
            setattr(p, name, describe_tensor(t[name].detach()))
    p.max_seqlen_k = t["k"].shape[0]  # ignored without cu_seqlens
    p.block_size = case["block_size"]
    p.softmax_scale = 0.0  # 1/sqrt(head_dim), as the references and SDPA use
    return p


def sel_reference_masked(x, block_idx, block_size, compute_dtype, dout=None, cut_at_diagonal=True):
    """Selection attention over every token of x = {"q" [T, HQ, Dqk], "k" [Tk, H, Dqk], "v" [Tk, H, Dv]}
    as dense attention with a mask: for each chunk of SEL_REFERENCE_CHUNK queries, the [HQ, chunk, Tk]
    scores of all keys, masked to the union of each token's valid blocks (aotk.h's B(t, h)) cut at its
    position; no gathering. Matmuls in compute_dtype, the rest in float32. Returns (out [T, HQ, Dv],
    lse [T, HQ], grads): float32; grads {"dq", "dk", "dv"} (float32, through autograd chunk by chunk) when
    dout is given, else None. A token that sees no key gets out 0, lse -inf and no gradient.
    cut_at_diagonal=False is a wrong kernel (the whole diagonal block), for the self-check's mutant."""
    seqlen_q, heads_q, head_dim = x["q"].shape
    seqlen_k, heads_kv = x["k"].shape[:2]
    group = heads_q // heads_kv
    scale = 1.0 / math.sqrt(head_dim)
    num_blocks = sel_num_blocks(seqlen_k, block_size)
    device = x["q"].device
    grad = dout is not None
    leaves = {n: x[n].detach().float().requires_grad_(grad) for n in ("q", "k", "v")}
    keys = torch.arange(seqlen_k, device=device)
    outs, lses = [], []
    with torch.set_grad_enabled(grad):
        for t0 in range(0, seqlen_q, SEL_REFERENCE_CHUNK):
            t1 = min(seqlen_q, t0 + SEL_REFERENCE_CHUNK)
            b = block_idx[t0:t1].long()
            p = torch.arange(t0, t1, device=device) + (seqlen_k - seqlen_q)
            valid = sel_valid_slots(b, p, block_size, seqlen_k)
            hits = torch.zeros(t1 - t0, heads_kv, num_blocks, dtype=torch.int32, device=device)
            hits.scatter_add_(2, b.clamp(0, num_blocks - 1), valid.to(torch.int32))
            visible = (hits > 0).repeat_interleave(block_size, dim=2)[:, :, :seqlen_k]
            if cut_at_diagonal:
                visible &= keys[None, None, :] <= p[:, None, None]
            visible = visible.repeat_interleave(group, dim=1).transpose(0, 1)  # [HQ, chunk, Tk]
            qc = leaves["q"][t0:t1].to(compute_dtype).transpose(0, 1)
            kh = leaves["k"].to(compute_dtype).transpose(0, 1).repeat_interleave(group, dim=0)
            vh = leaves["v"].to(compute_dtype).transpose(0, 1).repeat_interleave(group, dim=0)
            s = torch.matmul(qc, kh.transpose(-1, -2)).float() * scale
            s = s.masked_fill(~visible, float("-inf"))
            lse = torch.logsumexp(s, dim=-1)
            finite_lse = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
            prob = torch.exp(s - finite_lse.unsqueeze(-1))
            out = torch.matmul(prob.to(compute_dtype), vh).float().transpose(0, 1)
            if grad:
                torch.autograd.backward(out, dout[t0:t1].float())
            outs.append(out.detach())
            lses.append(lse.detach().transpose(0, 1))
    grads = {"d" + n: leaves[n].grad for n in ("q", "k", "v")} if grad else None
    return torch.cat(outs, 0), torch.cat(lses, 0), grads


def sel_reference_gathered(x, block_idx, tokens, block_size, compute_dtype, dout=None):
    """Selection attention for the listed tokens only, literally: per (token, kv head) the key rows of
    J(t, h) (sel_key_positions) gathered, softmax in float32. Matmuls in compute_dtype. Returns out
    [n, HQ, Dv], lse [n, HQ] and, with dout [n, HQ, Dv], dq [n, HQ, Dqk] through autograd (a token's dq
    depends on its own row only, so the sample's dq is exact); float32."""
    seqlen_q, heads_q, head_dim = x["q"].shape
    seqlen_k, heads_kv = x["k"].shape[:2]
    head_dim_v = x["v"].shape[2]
    group = heads_q // heads_kv
    scale = 1.0 / math.sqrt(head_dim)
    device = x["q"].device
    rows = block_idx[torch.tensor(tokens, device=block_idx.device)].tolist()
    q_leaf = x["q"][torch.tensor(tokens, device=device)].detach().float().requires_grad_(dout is not None)
    outs, lses = [], []
    with torch.set_grad_enabled(dout is not None):
        for i, t in enumerate(tokens):
            for h in range(heads_kv):
                positions = sel_key_positions(rows[i][h], t + seqlen_k - seqlen_q, block_size, seqlen_k)
                qg = q_leaf[i, h * group:(h + 1) * group].to(compute_dtype)
                if not positions:  # out 0, lse -inf, dq 0 (0 * q keeps q in the graph for autograd.grad)
                    outs.append(torch.zeros(group, head_dim_v, device=device) + 0 * qg.float().sum())
                    lses.append(torch.full((group,), float("-inf"), device=device))
                    continue
                j = torch.tensor(positions, device=device)
                kj = x["k"][j, h].detach().to(compute_dtype)
                vj = x["v"][j, h].detach().to(compute_dtype)
                s = torch.matmul(qg, kj.t()).float() * scale
                lse = torch.logsumexp(s, dim=-1)
                outs.append(torch.matmul(torch.exp(s - lse[:, None]).to(compute_dtype), vj).float())
                lses.append(lse.detach())
        out = torch.stack(outs).view(len(tokens), heads_q, head_dim_v)
        lse = torch.stack(lses).view(len(tokens), heads_q)
        dq = torch.autograd.grad(out, q_leaf, dout.float())[0] if dout is not None else None
    return out.detach(), lse, dq


def sel_unselected_key_rows(block_idx, block_size, seqlen_k):
    """bool [heads_kv, seqlen_k]: key rows that no token's valid slot selects (their dk, dv must be 0)."""
    num_blocks = sel_num_blocks(seqlen_k, block_size)
    seqlen_q, heads_kv = block_idx.shape[:2]
    hits = torch.zeros(heads_kv, num_blocks, dtype=torch.int64, device=block_idx.device)
    for t0 in range(0, seqlen_q, SEL_INDEX_CHUNK_TOKENS):
        t1 = min(seqlen_q, t0 + SEL_INDEX_CHUNK_TOKENS)
        b = block_idx[t0:t1].long()
        p = torch.arange(t0, t1, device=b.device) + (seqlen_k - seqlen_q)
        valid = sel_valid_slots(b, p, block_size, seqlen_k)
        hits.scatter_add_(1, b.clamp(0, num_blocks - 1).transpose(0, 1).reshape(heads_kv, -1),
                          valid.transpose(0, 1).reshape(heads_kv, -1).long())
    return (hits == 0)[:, torch.arange(seqlen_k, device=block_idx.device) // block_size]


def sel_check_full(case, aotk, backward):
    """Every token of a SEL_FULL_CHECK_TOKENS-token problem (the row's heads, head dim, block size, slots
    and index distribution): aotk's out and lse (sel_bwd: dq, dk, dv) against sel_reference_masked in
    float32, within FWD_ERR_FACTOR (BWD_ERR_FACTOR) x the same reference's error in bf16 plus a rounding
    floor. Outputs NaN-poisoned first. Returns (failure or None, summary)."""
    c = dict(case, seqlen=min(case["seqlen"], SEL_FULL_CHECK_TOKENS))
    t = sel_tensors(c, backward)
    params = sel_params(c, t)
    t["out"].fill_(float("nan"))
    t["lse"].fill_(float("nan"))
    aotk.sel_fwd(ctypes.byref(params), current_stream())
    if backward:
        for name in ("dq", "dk", "dv"):
            t[name].fill_(float("nan"))
        info = aotk.sel_query(AOTK_OP_SEL_BWD, params)
        workspace = torch.empty(max(info["workspace_bytes"], 16), device=common.DEVICE, dtype=torch.uint8)
        aotk.sel_bwd(ctypes.byref(params), workspace.data_ptr(), info["workspace_bytes"], current_stream())
    synchronize()
    x = {n: t[n] for n in ("q", "k", "v")}
    bs = c["block_size"]
    if not backward:
        out32, lse32, _ = sel_reference_masked(x, t["block_idx"], bs, torch.float32)
        out16, lse16, _ = sel_reference_masked(x, t["block_idx"], bs, torch.bfloat16)
        results = [compare_to_reference("out", t["out"], out32, out16, FWD_ERR_FACTOR, bf16_rounding_floor(out32)),
                   compare_to_reference("lse", t["lse"], lse32, lse16, FWD_ERR_FACTOR, LSE_FLOOR)]
    else:
        _, _, g32 = sel_reference_masked(x, t["block_idx"], bs, torch.float32, dout=t["dout"])
        _, _, g16 = sel_reference_masked(x, t["block_idx"], bs, torch.bfloat16, dout=t["dout"])
        results = [compare_to_reference(n, t[n], g32[n], g16[n], BWD_ERR_FACTOR, bf16_rounding_floor(g32[n]))
                   for n in ("dq", "dk", "dv")]
    texts = [text for _, text in results]
    bad = [text for ok, text in results if not ok]
    summary = f"all {c['seqlen']} tokens against the masked float32 reference: " + ", ".join(texts)
    if bad:
        return "aotk differs from the masked float32 reference on every token of " \
            f"{c['seqlen']}: " + ", ".join(bad), summary
    return None, summary


def sel_check_row(case, aotk, backward, t, params):
    """On the row's own tensors: the library's index check (aotk_sel_check_indices), then aotk's sel_fwd
    (and sel_bwd) with NaN-poisoned outputs: every element written; out and lse (sel_bwd: dq) of
    SEL_SAMPLE_TOKENS tokens against sel_reference_gathered; sel_bwd: dk and dv exactly 0 on the key rows
    no token selected. Leaves out and lse (the backward's inputs) computed. Returns (failure or None, summary)."""
    params_ref = ctypes.byref(params)
    workspace = torch.empty(16, device=common.DEVICE, dtype=torch.uint8)
    try:
        aotk.sel_check_indices(params_ref, workspace.data_ptr(), 16, current_stream())
    except AotkError as e:
        return f"the library rejects the benchmark's indices: {e}", ""
    outputs = ["out", "lse"] + (["dq", "dk", "dv"] if backward else [])
    for name in outputs:
        t[name].fill_(float("nan"))
    aotk.sel_fwd(params_ref, current_stream())
    if backward:
        info = aotk.sel_query(AOTK_OP_SEL_BWD, params)
        workspace = torch.empty(max(info["workspace_bytes"], 16), device=common.DEVICE, dtype=torch.uint8)
        aotk.sel_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"], current_stream())
    synchronize()
    unwritten = [name for name in outputs if torch.isnan(t[name]).any().item()]
    if unwritten:
        return f"aotk left NaN (poison) in {', '.join(unwritten)}", ""
    tokens = sel_sample_tokens(case["seqlen"], case["block_size"], SEL_SAMPLE_TOKENS, SEL_SAMPLE_SEED)
    rows = torch.tensor(tokens, device=common.DEVICE)
    x = {n: t[n] for n in ("q", "k", "v")}
    bs = case["block_size"]
    if not backward:
        out32, lse32, _ = sel_reference_gathered(x, t["block_idx"], tokens, bs, torch.float32)
        out16, lse16, _ = sel_reference_gathered(x, t["block_idx"], tokens, bs, torch.bfloat16)
        results = [compare_to_reference("out", t["out"][rows], out32, out16, FWD_ERR_FACTOR,
                                        bf16_rounding_floor(out32)),
                   compare_to_reference("lse", t["lse"][rows], lse32, lse16, FWD_ERR_FACTOR, LSE_FLOOR)]
    else:
        dout = t["dout"][rows]
        _, _, dq32 = sel_reference_gathered(x, t["block_idx"], tokens, bs, torch.float32, dout=dout)
        _, _, dq16 = sel_reference_gathered(x, t["block_idx"], tokens, bs, torch.bfloat16, dout=dout)
        results = [compare_to_reference("dq", t["dq"][rows], dq32, dq16, BWD_ERR_FACTOR, bf16_rounding_floor(dq32))]
        unselected = sel_unselected_key_rows(t["block_idx"], bs, t["k"].shape[0])
        for name in ("dk", "dv"):
            stray = t[name].transpose(0, 1)[unselected].abs().max().item() if unselected.any() else 0.0
            results.append((stray == 0, f"{name} on {int(unselected.sum())} unselected key rows {stray:.2g}"))
    texts = [text for _, text in results]
    bad = [text for ok, text in results if not ok]
    summary = f"{len(tokens)} sampled tokens against the gathered float32 reference: " + ", ".join(texts)
    if bad:
        return f"aotk differs from the gathered float32 reference on {len(tokens)} sampled tokens: " \
            + ", ".join(bad), summary
    return None, summary


def sel_anchor_times(t, backward):
    """({impl: ms}, {impl: layout}): SDPA's flash and cuDNN backends doing dense causal attention on the
    row's q, k, v (sdpa_anchor_times on [1, N, heads, d] views)."""
    dout = t["dout"][None] if backward else None
    return sdpa_anchor_times(t["q"][None], t["k"][None], t["v"][None], True, dout, SEL_ANCHORS)


# The public NSA Triton kernel (XunhaoLai/native-sparse-attention-triton, Apache-2.0,
# native_sparse_attention/ops/triton/topk_sparse_attention.py), issue 12's anchor: --nsa-path names a
# checkout of that repository in a folder git ignores (its code is never committed here). Only aotk's rows
# and the ratios are recorded.
NSA_OPTIONS = {"path": None, "fn": None}
NSA_CHECK_TOL = 2e-2  # relative L2 between its out / dq, dk, dv and aotk's (both bf16 with fp32 softmax)


def load_public_nsa(path):
    """topk_sparse_attention from the checkout at `path`: its two modules loaded by file, under their own
    names, without the package __init__ (which imports modules that need flash_attn)."""
    import importlib.util
    import types
    base = os.path.join(path, "native_sparse_attention", "ops", "triton")
    for name in ("native_sparse_attention", "native_sparse_attention.ops", "native_sparse_attention.ops.triton"):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = []
            sys.modules[name] = package
    for short in ("utils", "topk_sparse_attention"):
        full = "native_sparse_attention.ops.triton." + short
        spec = importlib.util.spec_from_file_location(full, os.path.join(base, short + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
    return sys.modules["native_sparse_attention.ops.triton.topk_sparse_attention"].topk_sparse_attention


def sel_public_nsa(case, t, backward, aotk_out, aotk_grads):
    """Times the public kernel on the row's q, k, v and indices (its layout: topk_idx [heads_kv, N, slots],
    cu_seqlens [0, N]) after checking its out (and dq, dk, dv) against aotk's. Returns (ms or None, note)."""
    fn = NSA_OPTIONS["fn"]
    n = case["seqlen"]
    # The public kernel reads a row's valid slots first (it counts them, then walks that many slots), as its
    # own selection produces them: each row's blocks ascending with -1 last, the same set of blocks (the
    # uniform-causal draw shuffles its -1 slots among the blocks; the NSA draws are already sorted).
    idx = t["block_idx"]
    ordered = torch.where(idx < 0, torch.full_like(idx, 2 ** 30), idx).sort(dim=-1).values
    topk_idx = torch.where(ordered == 2 ** 30, torch.full_like(ordered, -1), ordered).permute(1, 0, 2).contiguous()
    cu = torch.tensor([0, n], dtype=torch.int32, device=common.DEVICE)
    q, k, v = (t[x].detach().clone().requires_grad_(backward) for x in ("q", "k", "v"))
    out = fn(q, k, v, topk_idx, case["block_size"], cu)
    errs = {"out": rel_l2(out, aotk_out)}
    if backward:
        grads = torch.autograd.grad(out, (q, k, v), t["dout"], retain_graph=True)
        errs.update({name: rel_l2(g, aotk_grads[name]) for name, g in zip(("dq", "dk", "dv"), grads)})
    text = ", ".join(f"{k_} {v_:.2g}" for k_, v_ in errs.items())
    if not all(e_ < NSA_CHECK_TOL for e_ in errs.values()):
        return None, f"the public NSA kernel differs from aotk (relative L2 {text}): not timed"
    if backward:
        ms = time_ms(lambda: torch.autograd.grad(out, (q, k, v), t["dout"], retain_graph=True))
    else:
        with torch.no_grad():
            ms = time_ms(lambda: fn(q, k, v, topk_idx, case["block_size"], cu))
    return ms, f"public NSA kernel checked against aotk: relative L2 {text}"


def sel_run_case(case, aotk):
    """sel_run_case_unguarded, with any exception turned into the row's failure."""
    try:
        return sel_run_case_unguarded(case, aotk)
    except Exception as e:  # noqa: BLE001
        loud(f"ROW ABORTED, {sel_label(case)}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return {}, f"{type(e).__name__}: {str(e)[:300]}", {}


def sel_run_case_unguarded(case, aotk):
    """Checks aotk (sel_check_full, then sel_check_row on the row's tensors), times it, then times the
    dense causal anchors on the same q, k, v. Returns ({impl: ms}, failure or None, facts): facts has
    keys_selected (sum of |J(t, h)|), aotk's kernel info and the anchors' layouts."""
    backward = case["op"] == "sel_bwd"
    facts = {}
    for check in ("full", "row"):
        if check == "row":
            t = sel_tensors(case, backward)
            facts["keys_selected"] = int(sel_selected_keys(t["block_idx"], case["block_size"], case["seqlen"]).sum())
            params = sel_params(case, t)
        try:
            if check == "full":
                failure, summary = sel_check_full(case, aotk, backward)
            else:
                failure, summary = sel_check_row(case, aotk, backward, t, params)
        except AotkError as e:
            loud(f"aotk FAILED on {sel_label(case)}: {e}")
            return {}, f"aotk raised in the check: {e}", facts
        if failure:
            loud(f"ROW ABORTED, {sel_label(case)}: {failure}")
            return {}, failure, facts
        note(summary)
        empty_cache()

    results = {}
    params_ref = ctypes.byref(params)
    try:
        if not backward:
            info = aotk.sel_query(AOTK_OP_SEL_FWD, params)
            results["aotk"] = time_ms(lambda: aotk.sel_fwd(params_ref, current_stream()))
        else:  # out and lse: the forward's, from sel_check_row
            info = aotk.sel_query(AOTK_OP_SEL_BWD, params)
            workspace = torch.empty(max(info["workspace_bytes"], 16), device=common.DEVICE, dtype=torch.uint8)
            results["aotk"] = time_ms(lambda: aotk.sel_bwd(params_ref, workspace.data_ptr(), info["workspace_bytes"],
                                                           current_stream()))
            del workspace
    except AotkError as e:
        loud(f"aotk FAILED while timing {sel_label(case)}: {e}")
        return results, f"aotk raised while timing: {e}", facts
    facts["info"] = info
    note(f"aotk kernel {info['kernel_name']} (sm_{info['arch']}{', from PTX' if info['from_ptx'] else ''}, "
         f"{info['launches']} launch(es)" + (f", workspace {info['workspace_bytes']} bytes" if backward else "") + ")")
    if NSA_OPTIONS["fn"] is not None:
        # aotk's out (and gradients) from the check are the reference the public kernel must match.
        ms, text = sel_public_nsa(case, t, backward, t["out"], {name: t[name] for name in ("dq", "dk", "dv")
                                                                if name in t})
        note(text)
        if ms is not None:
            results["nsa-triton"] = ms
        empty_cache()
    for name in ("out", "lse", "dq", "dk", "dv", "block_idx"):
        t.pop(name, None)
    del params, params_ref
    empty_cache()
    anchor_ms, facts["anchor_layouts"] = sel_anchor_times(t, backward)
    results.update(anchor_ms)
    del t
    return results, None, facts


def sel_work(case, keys_selected):
    """(pairs, flops) of aotk's selection: pairs = (heads_q / heads_kv) x sum of |J(t, h)| score pairs;
    FLOPs = 4 x pairs x head_dim (q.k and p.v, a multiply-add each: 4 * tokens * heads_q * keys * d), 2.5x
    that for the backward."""
    pairs = keys_selected * (case["heads_q"] // case["heads_kv"])
    flops = 4.0 * pairs * case["head_dim"]
    return pairs, (2.5 * flops if case["op"] == "sel_bwd" else flops)


def sel_dense_work(case):
    """(pairs, flops) of the dense causal anchors: the exact causal pairs, and anchors.md's FLOP count
    (4 * heads * N^2 * d, halved for causal; 2.5x for the backward), as the grid rows count."""
    n, h, d = case["seqlen"], case["heads_q"], case["head_dim"]
    flops = 4.0 * h * n * n * d / 2
    return h * n * (n + 1) // 2, (2.5 * flops if case["op"] == "sel_bwd" else flops)


def sel_gathered_bytes(case, keys_selected):
    """The forward's bytes if every gathered K/V row came from memory: q read, out and lse written, the
    indices read, (head_dim_qk + head_dim_v) bf16 per key of each (token, kv head) (its G query heads share
    one gather). Neighbouring tokens share blocks, so the DRAM traffic can be lower (L2 hits)."""
    n, hq, hkv, d = case["seqlen"], case["heads_q"], case["heads_kv"], case["head_dim"]
    return 2 * n * hq * d * 2 + n * hq * 4 + n * hkv * case["slots"] * 4 + keys_selected * 2 * d * 2


def sel_verdict(op, seqlen, speedup, distribution=SEL_INDEX_DISTRIBUTION):
    """None where no bar applies (issue 5's bars are on its own draw, uniform-causal); '-' when not
    measured; else 'ok' / 'LOW' against SEL_BARS."""
    bar = SEL_BARS.get((op, seqlen)) if distribution == SEL_INDEX_DISTRIBUTION else None
    if bar is None:
        return None
    if speedup is None:
        return "-"
    minimum, strict = bar
    return "ok" if (speedup > minimum if strict else speedup >= minimum) else "LOW"


def sel_bar_text(op, seqlen, distribution=SEL_INDEX_DISTRIBUTION):
    bar = SEL_BARS.get((op, seqlen)) if distribution == SEL_INDEX_DISTRIBUTION else None
    return "-" if bar is None else f"{'>' if bar[1] else '>='}{bar[0]:g}x"


SEL_TABLE_HEAD = (f"{'op':>7} {'indices':>14} {'tokens':>6} {'keys/q':>7} | {'aotk ms':>8} {'TF/s':>6} | "
                  f"{'flash ms':>9} {'cudnn ms':>9} | {'x FA2':>6} {'x cuDNN':>7} {'x NSA':>6} | {'bar':>6} {'verdict':>7}")


def sel_table_line(case, ms, keys_selected, speedup, failure):
    keys_per_query = keys_selected / (case["seqlen"] * case["heads_kv"]) if keys_selected else None
    dist = case.get("index_distribution", SEL_INDEX_DISTRIBUTION)
    s = (f"{case['op']:>7} {dist:>14} {case['seqlen']:>6} "
         + (f"{keys_per_query:>7.1f}" if keys_per_query else f"{'-':>7}"))
    if "aotk" in ms:
        s += f" | {ms['aotk']:>8.3f} {sel_work(case, keys_selected)[1] / ms['aotk'] / 1e9:>6.1f}"
    else:
        s += f" | {'-':>8} {'-':>6}"
    s += " | " + " ".join(f"{ms[name]:>9.2f}" if name in ms else f"{'-':>9}" for name in SEL_IMPLS[1:])
    s += " | " + " ".join(f"{speedup[name]:>{w - 1}.2f}x" if speedup.get(name) else f"{'-':>{w}}"
                          for name, w in (("sdpa-flash", 6), ("sdpa-cudnn", 7), ("nsa-triton", 6)))
    s += (f" | {sel_bar_text(case['op'], case['seqlen'], dist):>6} "
          f"{sel_verdict(case['op'], case['seqlen'], speedup.get('sdpa-flash'), dist) or '':>7}")
    if failure:
        s += f"   FAILED: {failure}"
    return s


def run_sel_op(op, quick, aotk):
    """Runs one selection op's rows. Returns (json rows, table lines, failures, bar summary lines)."""
    rows, lines, failures = [], [], []
    verdicts = []
    for case in sel_cases(op, quick):
        print(f"\n{sel_label(case)}", flush=True)
        ms, failure, facts = sel_run_case(case, aotk)
        empty_cache()
        keys_selected = facts.get("keys_selected")
        speedup = {name: ms[name] / ms["aotk"] for name in SEL_IMPLS[1:] + ["nsa-triton"]
                   if name in ms and "aotk" in ms}
        common = {"op": op, "dtype": case["dtype"], "head_dim": case["head_dim"], "head_dim_qk": case["head_dim"],
                  "head_dim_v": case["head_dim"], "causal": True, "seqlen_q": case["seqlen"],
                  "seqlen_k": case["seqlen"], "batch": 1, "heads_q": case["heads_q"], "heads_kv": case["heads_kv"],
                  "block_size": case["block_size"], "slots": case["slots"],
                  "index_distribution": case["index_distribution"], "index_seed": SEL_INDEX_SEED + case["seqlen"]}
        for impl in SEL_IMPLS:
            if impl not in ms:
                continue
            if impl == "aotk":
                pairs, flops = sel_work(case, keys_selected)
                row = dict(common, impl=impl, work="selection", keys_selected=keys_selected,
                           keys_per_query=round(keys_selected / (case["seqlen"] * case["heads_kv"]), 2),
                           pairs=pairs, flops=flops, ms=ms[impl], tflops=round(flops / ms[impl] / 1e9, 2),
                           speedup_vs_flash=round(speedup["sdpa-flash"], 3) if "sdpa-flash" in speedup else None,
                           speedup_vs_cudnn=round(speedup["sdpa-cudnn"], 3) if "sdpa-cudnn" in speedup else None)
                # Issue 12's anchor: only the ratio is recorded (the public kernel's own row is not).
                if "nsa-triton" in speedup:
                    row["speedup_vs_nsa_triton"] = round(speedup["nsa-triton"], 3)
                bar = (SEL_BARS.get((op, case["seqlen"])) if case["index_distribution"] == SEL_INDEX_DISTRIBUTION
                       else None)
                row["bar_vs_flash"] = None if bar is None else {"speedup": bar[0], "strict": bar[1]}
                row["verdict"] = sel_verdict(op, case["seqlen"], speedup.get("sdpa-flash"), case["index_distribution"])
                if op == "sel_fwd":
                    row["gathered_bytes"] = sel_gathered_bytes(case, keys_selected)
                    row["gbps"] = round(row["gathered_bytes"] / ms[impl] / 1e6, 1)
                info = facts.get("info")
                if info is not None:
                    row["kernel"] = info["kernel_name"]
                    row["launches"] = info["launches"]
                    if op == "sel_bwd":
                        row["workspace_bytes"] = info["workspace_bytes"]
            else:
                pairs, flops = sel_dense_work(case)
                row = dict(common, impl=impl, work="dense causal", gqa=facts.get("anchor_layouts", {}).get(impl),
                           pairs=pairs, flops=flops, ms=ms[impl], tflops=round(flops / ms[impl] / 1e9, 2))
            rows.append(row)
        if failure:
            failures.append(f"{sel_label(case)}: {failure}")
        verdict = sel_verdict(op, case["seqlen"], speedup.get("sdpa-flash"), case["index_distribution"])
        if verdict is not None:
            got = f"{speedup['sdpa-flash']:.2f}x" if "sdpa-flash" in speedup else "not measured"
            verdicts.append((verdict, f"{op} {case['seqlen']} tokens: {got} (bar {sel_bar_text(op, case['seqlen'])}): "
                                      + {"ok": "ok", "LOW": "LOW", "-": "not measured"}[verdict]))
        line = sel_table_line(case, ms, keys_selected, speedup, failure)
        lines.append(line)
        print(SEL_TABLE_HEAD)
        print(line, flush=True)
    bar = [f"{op}: bars (aotk's speedup over sdpa-flash's dense causal attention on the same q, k, v): "
           f"{sum(1 for v_, _ in verdicts if v_ == 'ok')} of {len(verdicts)} pass"]
    bar += [f"  {text}" for _, text in verdicts]
    return rows, lines, failures, bar


def print_sel_table(lines, bar_lines):
    print(f"\nSelection rows: one sequence, heads {SEL_HEADS_Q}/{SEL_HEADS_KV}, d {SEL_HEAD_DIM}, block "
          f"{SEL_BLOCK_SIZE}, {SEL_SLOTS} slots, indices as the column says (issue 5's bars on uniform-causal "
          f"only); keys/q = mean |J(t, h)|; aotk's "
          f"TF/s counts the pairs it computes (4 * pairs * d, backward 2.5x); flash and cudnn run dense causal "
          f"attention on the same q, k, v; 'x FA2' / 'x cuDNN' = their time / aotk's")
    print(SEL_TABLE_HEAD)
    print("-" * len(SEL_TABLE_HEAD))
    for line in lines:
        print(line)
    for line in bar_lines:
        print(line)
    sys.stdout.flush()
