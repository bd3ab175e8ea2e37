"""--self-check: what can be checked with no GPU (and no torch)."""
import ctypes
import os
import random
import subprocess
import tempfile
import warnings

from . import common, features, selection
from .common import (AOTK_ALIGN_BOTTOM_RIGHT, AOTK_ALIGN_TOP_LEFT, AOTK_OP_SEL_BWD, HIDDEN, TORCH_TO_AOTK_DTYPE,
                     TOTAL_TOKENS, AotkAttnParams, AotkBuildInfo, AotkError, AotkKernelInfo, AotkSelParams,
                     AotkTensor, max_abs_diff, torch)
from .grid import fwd_flops
from .features import (FEATURE_GRID_SEQLENS, FEATURE_HEAD_DIMS, VARLEN_SEED, VARLEN_SPREAD, WINDOW_CAUSAL_LEFT,
                       WINDOW_SYMMETRIC, check_spec, feature_cases, feature_check, feature_flops, feature_label,
                       feature_tensors, finite_abs_diff, reference_attention, reference_mask, sequence_pairs,
                       spec_full_pairs, spec_pairs, varlen_lengths)
from .selection import (SEL_BARS, SEL_BLOCK_SIZE, SEL_HEADS_KV, SEL_INDEX_DISTRIBUTION, SEL_INDEX_DISTRIBUTIONS,
                        SEL_INDEX_SEED, SEL_OPS, SEL_SAMPLE_SEED, SEL_SAMPLE_TOKENS, SEL_SEQLENS, SEL_SEQLENS_QUICK,
                        SEL_SLOTS, sel_block_indices, sel_brute_force_key_count, sel_cases, sel_check_full,
                        sel_check_row, sel_dense_work, sel_expected_keys, sel_key_positions, sel_label,
                        sel_nsa_distribution_problems, sel_num_blocks, sel_params, sel_reference_gathered,
                        sel_reference_masked, sel_sample_tokens, sel_selected_keys, sel_tensors, sel_work)
from .flex import flex_document_mask, to_bhsd
from .gqa import GQA_OPS, gqa_cases, gqa_flops, gqa_label
from .varlen_docs import (DOC_COUNT, DOC_HEAD_DIMS, DOC_LENS, DOC_OPS, doc_cases, doc_check, doc_flops, doc_label,
                          doc_plain_tensors, doc_reference, doc_spec, doc_to_bhsd)
from .op_registry import ALL_OPS, OPS

# ---------------------------------------------------------------------------------------------------
# --self-check: what can be checked with no GPU (and no torch)
# ---------------------------------------------------------------------------------------------------

def brute_force_pairs(seqlen_q, seqlen_k, causal, causal_align, window_left, window_right):
    """Every (i, j) tested against aotk.h's rule as written, one at a time."""
    diag = seqlen_k - seqlen_q if causal_align == AOTK_ALIGN_BOTTOM_RIGHT else 0
    right = 0 if causal else window_right
    n = 0
    for i in range(seqlen_q):
        for j in range(seqlen_k):
            if window_left >= 0 and not i + diag - window_left <= j:
                continue
            if right >= 0 and not j <= i + diag + right:
                continue
            n += 1
    return n


def ctypes_layout_problems():
    """Compiles a probe of include/aotk.h's offsets and sizes and compares them with the ctypes
    structs. Returns a list of mismatches, or None when no C compiler or header is at hand."""
    header_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include")
    cc = os.environ.get("CC", "cc")
    if not os.path.exists(os.path.join(header_dir, "aotk.h")):
        return None
    structs = [("aotk_tensor", AotkTensor), ("aotk_attn_params", AotkAttnParams),
               ("aotk_sel_params", AotkSelParams), ("aotk_kernel_info", AotkKernelInfo),
               ("aotk_build_info", AotkBuildInfo)]
    src = ["#include <stdio.h>", "#include <stddef.h>", '#include "aotk.h"', "int main(void) {"]
    for cname, cls in structs:
        src.append(f'  printf("{cname} sizeof %zu\\n", sizeof({cname}));')
        src += [f'  printf("{cname} {f} %zu\\n", offsetof({cname}, {f}));' for f, _ in cls._fields_]
    src.append("  return 0;\n}")
    with tempfile.TemporaryDirectory() as tmp:
        c_path, exe = os.path.join(tmp, "probe.c"), os.path.join(tmp, "probe")
        with open(c_path, "w") as f:
            f.write("\n".join(src) + "\n")
        try:
            subprocess.run([cc, "-std=c11", "-I", header_dir, c_path, "-o", exe], check=True, capture_output=True)
            out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return None
    c_values = {}
    for line in out.splitlines():
        cname, field, value = line.split()
        c_values[(cname, field)] = int(value)
    problems = []
    for cname, cls in structs:
        if c_values[(cname, "sizeof")] != ctypes.sizeof(cls):
            problems.append(f"sizeof({cname}) = {c_values[(cname, 'sizeof')]}, ctypes {ctypes.sizeof(cls)}")
        for f, _ in cls._fields_:
            if c_values[(cname, f)] != getattr(cls, f).offset:
                problems.append(f"offsetof({cname}, {f}) = {c_values[(cname, f)]}, ctypes {getattr(cls, f).offset}")
    return problems


def tensor_from_aotk(at):
    """A torch view of the CPU memory an aotk_tensor describes (the stand-in's way to read its args)."""
    dtype = {v: k for k, v in TORCH_TO_AOTK_DTYPE.items()}[at.dtype]
    shape, strides = list(at.shape[:at.rank]), list(at.strides[:at.rank])
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    itemsize = torch.empty((), dtype=dtype).element_size()
    flat = torch.frombuffer((ctypes.c_char * (span * itemsize)).from_address(at.data), dtype=dtype, count=span)
    return flat.as_strided(shape, strides)


class TorchStandIn:
    """aotk_attn_fwd / aotk_attn_bwd in torch on the CPU, reading everything from the params struct
    (--self-check only). With drop = a feature name, that feature is ignored (in `drop_in`: "fwd",
    "bwd" or both), as a broken library would: the check must then fail."""

    def __init__(self, drop=None, drop_in=("fwd", "bwd")):
        self.drop, self.drop_in = drop, drop_in

    def query(self, op, params):
        return {"kernel_name": "torch stand-in", "arch": 0, "from_ptx": 0, "workspace_bytes": 0, "launches": 1,
                "head_dim_qk": params.q.shape[params.q.rank - 1], "head_dim_v": params.v.shape[params.v.rank - 1],
                "features": []}

    def _problem(self, p, call):
        spec = {"causal": bool(p.causal), "causal_align": p.causal_align, "window_left": p.window_left,
                "window_right": p.window_right, "softcap": p.softcap, "dropout_p": p.dropout_p,
                "seqlens_q": None, "seqlens_k": None}
        t = {name: tensor_from_aotk(getattr(p, name)) for name in ("q", "k", "v")}
        if p.cu_seqlens_q.data:
            for side in ("q", "k"):
                cu = tensor_from_aotk(getattr(p, f"cu_seqlens_{side}")).tolist()
                spec[f"seqlens_{side}"] = [b - a for a, b in zip(cu, cu[1:])]
            keep_shape = (len(spec["seqlens_q"]), t["q"].shape[1], p.max_seqlen_q, p.max_seqlen_k)
        else:
            keep_shape = (t["q"].shape[0], t["q"].shape[2], t["q"].shape[1], t["k"].shape[1])
        for field in ("alibi_slopes", "sinks"):
            if getattr(p, field).data:
                t[field] = tensor_from_aotk(getattr(p, field))
        keep = None
        if p.dropout_p > 0:  # a keep mask that depends only on the RNG state, so the backward gets the forward's
            seed, offset = tensor_from_aotk(p.rng_state).tolist()
            g = torch.Generator().manual_seed((seed ^ offset) & (2 ** 63 - 1))
            keep = torch.rand(keep_shape, generator=g) >= p.dropout_p
            if p.dropout_mask.data:
                tensor_from_aotk(p.dropout_mask).copy_(keep)
        if self.drop is not None and call in self.drop_in:
            d = self.drop
            if d == "softcap":
                spec["softcap"] = 0.0
            elif d in ("alibi", "sinks"):
                t.pop("alibi_slopes" if d == "alibi" else "sinks", None)
            elif d == "window":
                spec["window_left"] = -1
            elif d == "align":
                spec["causal_align"] = 1 - spec["causal_align"]
            elif d == "causal":
                spec["causal"] = False
            elif d == "dropout":
                keep = None
            elif d == "varlen" and spec["seqlens_q"] is not None:  # one sequence across the packed ones
                # (the keep mask no longer fits: dropped); a dense call is left as it is
                spec["seqlens_q"], spec["seqlens_k"] = [sum(spec["seqlens_q"])], [sum(spec["seqlens_k"])]
                keep = None
        return spec, t, keep

    def attn_fwd(self, params_ref, stream):
        p = params_ref._obj
        spec, t, keep = self._problem(p, "fwd")
        with torch.no_grad():
            out, lse = reference_attention(t, spec, keep, torch.float32)
        tensor_from_aotk(p.out).copy_(out)
        if p.lse.data:
            tensor_from_aotk(p.lse).copy_(lse)

    def attn_bwd(self, params_ref, workspace, workspace_bytes, stream):
        p = params_ref._obj
        spec, t, keep = self._problem(p, "bwd")
        names = ["q", "k", "v"] + (["sinks"] if "sinks" in t else [])
        leaves = {n: t[n].float().requires_grad_(True) for n in names}
        out, _ = reference_attention(t, spec, keep, torch.float32, leaves)
        grads = torch.autograd.grad(out, [leaves[n] for n in names], tensor_from_aotk(p.dout).float())
        for n, g in zip(names, grads):
            if n != "sinks" or p.dsinks.data:
                tensor_from_aotk(getattr(p, "d" + n)).copy_(g)


# The feature each row's stand-in mutant ignores: its check must fail.
STAND_IN_MUTANTS = {"causal": "causal", "causal-top-left": "align", f"window-{WINDOW_CAUSAL_LEFT}-0": "window",
                    f"window-{WINDOW_SYMMETRIC[0]}-{WINDOW_SYMMETRIC[1]}": "window", "varlen": "varlen",
                    "softcap": "softcap", "alibi": "alibi", "sinks": "sinks", "dropout": "dropout", "all": "window",
                    "all-varlen": "varlen"}


def stand_in_checks(report):
    """feature_check of every feature row (at d = 64) against the stand-in, then against the mutant
    that ignores the row's feature (in the backward only, for bwd rows). On the CPU, so the checks run
    at 512 tokens with 2 heads, and windows shrink by the same factor 4 to keep cutting the rows."""
    saved = (common.DEVICE, features.CHECK_TOKENS, features.CHECK_HEADS, features.CHECK_BATCH,
             features.CHECK_VARLEN_SEQS)
    (common.DEVICE, features.CHECK_TOKENS, features.CHECK_HEADS, features.CHECK_BATCH,
     features.CHECK_VARLEN_SEQS) = "cpu", saved[1] // 4, 2, 1, 4
    torch.manual_seed(0)
    try:
        for op in ("fwd_feat", "bwd_feat"):
            backward = op == "bwd_feat"
            for spec in feature_cases(op, [4096], [64]):
                if spec["role"] == "base" and spec["head_dim_qk"] != 64:
                    continue
                spec = dict(spec, **{side: spec[side] // 4 if spec[side] > 0 else spec[side]
                                     for side in ("window_left", "window_right")})
                failure, summary = feature_check(spec, TorchStandIn(), backward)
                report(failure is None, f"{op} {spec['feature']}: the stand-in passes the check"
                       + (f"; {failure}" if failure else ""))
                drop = STAND_IN_MUTANTS.get(spec["feature"])
                if drop:
                    mutant = TorchStandIn(drop, ("bwd",) if backward else ("fwd",))
                    failure, _ = feature_check(spec, mutant, backward)
                    report(failure is not None, f"{op} {spec['feature']}: a stand-in ignoring {drop} fails the check"
                           + (f" ({failure[:90]})" if failure else ""))
    finally:
        (common.DEVICE, features.CHECK_TOKENS, features.CHECK_HEADS, features.CHECK_BATCH,
         features.CHECK_VARLEN_SEQS) = saved


class TorchSelStandIn:
    """aotk_sel_* in torch on the CPU, reading everything from the AotkSelParams struct through
    sel_reference_masked (--self-check only). With drop = "causal-cut" (the diagonal block's keys after the
    token are kept) or "packed-slots" (a row's slots after its first -1 are not read), in the calls named
    by drop_in, it is a broken library: the checks must then fail."""

    def __init__(self, drop=None, drop_in=("fwd", "bwd")):
        self.drop, self.drop_in = drop, drop_in

    def sel_query(self, op, params):
        return {"kernel_name": "torch stand-in", "arch": 0, "from_ptx": 0, "launches": 1,
                "workspace_bytes": 16 if op == AOTK_OP_SEL_BWD else 0,
                "head_dim_qk": params.q.shape[2], "head_dim_v": params.v.shape[2], "features": []}

    def _problem(self, p, call):
        x = {name: tensor_from_aotk(getattr(p, name)) for name in ("q", "k", "v")}
        idx = tensor_from_aotk(p.block_idx)
        cut = True
        if self.drop is not None and call in self.drop_in:
            if self.drop == "causal-cut":
                cut = False
            elif self.drop == "packed-slots":
                idx = idx.masked_fill(torch.cumsum((idx < 0).to(torch.int32), dim=-1) > 0, -1)
        return x, idx, cut

    def sel_check_indices(self, params_ref, workspace, workspace_bytes, stream):
        p = params_ref._obj
        idx = tensor_from_aotk(p.block_idx).long()
        num_blocks = sel_num_blocks(p.k.shape[0], p.block_size)
        if ((idx < -1) | (idx >= num_blocks)).any():
            raise AotkError("aotk_sel_check_indices failed: AOTK_ERROR_INVALID_INDICES: a block id out of range")
        ordered = idx.sort(dim=-1).values
        if ((ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] >= 0)).any():
            raise AotkError("aotk_sel_check_indices failed: AOTK_ERROR_INVALID_INDICES: a block listed twice")

    def sel_fwd(self, params_ref, stream):
        p = params_ref._obj
        x, idx, cut = self._problem(p, "fwd")
        out, lse, _ = sel_reference_masked(x, idx, p.block_size, torch.float32, cut_at_diagonal=cut)
        tensor_from_aotk(p.out).copy_(out)
        if p.lse.data:
            tensor_from_aotk(p.lse).copy_(lse)

    def sel_bwd(self, params_ref, workspace, workspace_bytes, stream):
        p = params_ref._obj
        x, idx, cut = self._problem(p, "bwd")
        _, _, grads = sel_reference_masked(x, idx, p.block_size, torch.float32, dout=tensor_from_aotk(p.dout),
                                           cut_at_diagonal=cut)
        for name, g in grads.items():
            tensor_from_aotk(getattr(p, name)).copy_(g)


# A small selection problem for the CPU: 32 blocks of 32 at 1024 tokens, 4 slots (sparse past token 128),
# heads 8/2 (G = 4), d 64; the full check at 256 tokens (8 blocks, still sparse).
SEL_STAND_IN_CASE = {"dtype": "bf16", "seqlen": 1024, "heads_q": 8, "heads_kv": 2, "head_dim": 64,
                     "block_size": 32, "slots": 4}
SEL_STAND_IN_FULL_CHECK_TOKENS = 256


def sel_stand_in_checks(report):
    """The selection pieces that need torch, on the CPU: the index draw, the key count, and both checks
    against the stand-in (must pass) and its mutants (must fail)."""
    saved = common.DEVICE, selection.SEL_FULL_CHECK_TOKENS
    common.DEVICE, selection.SEL_FULL_CHECK_TOKENS = "cpu", SEL_STAND_IN_FULL_CHECK_TOKENS
    torch.manual_seed(0)
    try:
        # The draw: distinct causal blocks, min(slots, causal blocks) of them, -1 elsewhere, -1 slots between
        # valid ones somewhere, the same for the same seed; the key count against sel_key_positions.
        n, h, s, bs = 2048, SEL_HEADS_KV, SEL_SLOTS, SEL_BLOCK_SIZE
        idx = sel_block_indices(n, h, s, bs, SEL_INDEX_SEED + n, "cpu")
        problems = []
        if not torch.equal(idx, sel_block_indices(n, h, s, bs, SEL_INDEX_SEED + n, "cpu")):
            problems.append("not repeatable")
        last = (torch.arange(n) // bs)[:, None, None]
        valid = idx >= 0
        if ((idx < -1) | (valid & (idx > last))).any():
            problems.append("a block out of range or after the diagonal")
        if not torch.equal(valid.sum(-1), torch.clamp(last[:, :, 0] + 1, max=s).expand(n, h)):
            problems.append("wrong number of blocks per row")
        ordered = idx.sort(dim=-1).values
        if ((ordered[..., 1:] == ordered[..., :-1]) & (ordered[..., 1:] >= 0)).any():
            problems.append("a block listed twice")
        if not (valid[..., 1:] & ~valid[..., :-1]).any():
            problems.append("the -1 slots are never before a valid one (slots not shuffled)")
        counts = sel_selected_keys(idx, bs, n)
        rng = random.Random(3)
        for _ in range(200):
            t, hh = rng.randrange(n), rng.randrange(h)
            if counts[t, hh].item() != len(sel_key_positions(idx[t, hh].tolist(), t, bs, n)):
                problems.append(f"sel_selected_keys at ({t}, {hh})")
                break
        expected = h * sel_expected_keys(n, bs, s)
        if abs(counts.sum().item() / expected - 1) > 0.01:
            problems.append(f"{counts.sum().item()} keys selected, expected about {expected:.0f}")
        report(not problems, f"selection indices at {n} tokens: causal, distinct, min({s}, t // {bs} + 1) per row, "
               f"shuffled, repeatable; key counts ({counts.sum().item()} vs {expected:.0f} expected)"
               + ("; " + "; ".join(problems) if problems else ""))

        # The references agree with each other (masked dense vs gathered), forward and dq.
        c = dict(SEL_STAND_IN_CASE, op="sel_bwd")
        t = sel_tensors(c, True)
        x = {name: t[name] for name in ("q", "k", "v")}
        tokens = sel_sample_tokens(c["seqlen"], c["block_size"], SEL_SAMPLE_TOKENS, SEL_SAMPLE_SEED)
        out_m, lse_m, g_m = sel_reference_masked(x, t["block_idx"], c["block_size"], torch.float32, dout=t["dout"])
        rows = torch.tensor(tokens)
        out_g, lse_g, dq_g = sel_reference_gathered(x, t["block_idx"], tokens, c["block_size"], torch.float32,
                                                    dout=t["dout"][rows])
        errs = [finite_abs_diff(out_m[rows], out_g), finite_abs_diff(lse_m[rows], lse_g),
                finite_abs_diff(g_m["dq"][rows], dq_g)]
        report(max(errs) < 1e-4, f"selection references agree (masked dense vs gathered, {len(tokens)} tokens): "
               f"out {errs[0]:.2g}, lse {errs[1]:.2g}, dq {errs[2]:.2g}")

        # The checks: the stand-in passes; each mutant fails each check it should.
        for op in SEL_OPS:
            backward = op == "sel_bwd"
            c = dict(SEL_STAND_IN_CASE, op=op)
            for drop in (None, "causal-cut", "packed-slots"):
                lib = TorchSelStandIn(drop, ("bwd",) if backward else ("fwd",))
                for check in ("full", "row"):
                    if check == "full":
                        failure, _ = sel_check_full(c, lib, backward)
                    else:
                        t = sel_tensors(c, backward)
                        failure, _ = sel_check_row(c, lib, backward, t, sel_params(c, t))
                    what = f"{op} {check} check: " + ("the stand-in passes" if drop is None
                                                      else f"a stand-in ignoring the {drop} rule fails")
                    report((failure is None) == (drop is None),
                           what + (f" ({failure[:110]})" if failure else ""))
        # A drawn index listed twice: the library's index check must refuse the row.
        c = dict(SEL_STAND_IN_CASE, op="sel_fwd")
        t = sel_tensors(c, False)
        t["block_idx"][-1, 0, :2] = t["block_idx"][-1, 0, 2]
        failure, _ = sel_check_row(c, TorchSelStandIn(), False, t, sel_params(c, t))
        report(failure is not None and "indices" in failure,
               "sel_fwd row check: indices the library's check refuses fail the row")
    finally:
        common.DEVICE, selection.SEL_FULL_CHECK_TOKENS = saved


def sel_case_problems():
    """The selection rows' invariants that need no torch: every bar has its row, sizes fit the kernel's
    contract, the FLOP counts are the brief's."""
    problems = []
    for op in SEL_OPS:
        cases = list(sel_cases(op, False))
        for dist in SEL_INDEX_DISTRIBUTIONS:
            seqlens = [c["seqlen"] for c in cases if c["index_distribution"] == dist]
            if seqlens != SEL_SEQLENS:
                problems.append(f"{op} {dist}: tokens {seqlens}")
        seqlens = [c["seqlen"] for c in cases if c["index_distribution"] == SEL_INDEX_DISTRIBUTION]
        for (bar_op, n) in SEL_BARS:
            if bar_op == op and n not in seqlens:
                problems.append(f"{op}: the bar at {n} tokens has no {SEL_INDEX_DISTRIBUTION} row")
        for c in cases:
            if c["heads_q"] % c["heads_kv"] or c["block_size"] not in (32, 64, 128):
                problems.append(f"{sel_label(c)}: not a shape aotk.h accepts")
            if sel_num_blocks(c["seqlen"], c["block_size"]) < c["slots"]:
                problems.append(f"{sel_label(c)}: fewer blocks than slots")
            keys = c["seqlen"] * c["heads_kv"] * 1000
            pairs, flops = sel_work(c, keys)
            want = 4.0 * c["seqlen"] * c["heads_q"] * 1000 * c["head_dim"] * (2.5 if op == "sel_bwd" else 1.0)
            if pairs != keys * c["heads_q"] // c["heads_kv"] or flops != want:
                problems.append(f"{sel_label(c)}: FLOPs {flops} vs 4 * tokens * heads_q * keys * d = {want}")
            if sel_dense_work(c)[1] != fwd_flops({"batch": 1, "heads_q": c["heads_q"], "seqlen_q": c["seqlen"],
                                                  "seqlen_k": c["seqlen"], "head_dim": c["head_dim"],
                                                  "causal": True}) * (2.5 if op == "sel_bwd" else 1.0):
                problems.append(f"{sel_label(c)}: the anchors' FLOPs are not the grid's count")
    for op in SEL_OPS:
        if not any(o == op and n in SEL_SEQLENS_QUICK for o, n in SEL_BARS):
            problems.append(f"{op}: --quick runs no row with a bar")
    return problems


def new_rows_problems():
    """The GQA and varlen-document rows' invariants that need no torch: shapes, token counts, FLOP counts
    (against the exact pair count of the mask), and that --ops can select them."""
    problems = []
    for op in GQA_OPS:
        cases = list(gqa_cases(op))
        if not cases:
            problems.append(f"{op}: no rows")
        for c in cases:
            if c["heads_q"] % c["heads_kv"] or c["heads_q"] == c["heads_kv"]:
                problems.append(f"{gqa_label(c)}: not a GQA shape")
            if c["batch"] * c["seqlen_q"] != TOTAL_TOKENS:
                problems.append(f"{gqa_label(c)}: {c['batch'] * c['seqlen_q']} tokens, the grid has {TOTAL_TOKENS}")
            n, d = c["seqlen_q"], c["head_dim"]
            want = 4.0 * c["batch"] * c["heads_q"] * n * n * d / (2 if c["causal"] else 1)
            if gqa_flops(c) != want * (2.5 if op == "bwd_gqa" else 1.0):
                problems.append(f"{gqa_label(c)}: FLOPs {gqa_flops(c)}, the grid's count {want}")
    for op in DOC_OPS:
        specs = list(doc_cases(op))
        keys = [(s["doc_len"], s["head_dim_qk"], s["causal"]) for s in specs]
        if len(set(keys)) != len(keys) or len(keys) != 2 * len(DOC_LENS) * len(DOC_HEAD_DIMS) \
                or not {512, 1024} <= {k[0] for k in keys} or not {64, 128} <= {k[1] for k in keys}:
            problems.append(f"{op}: rows {keys} (issue 11's: 512 and 1024 tokens, d 64 and 128, causal and not)")
        for s in specs:
            tokens = sum(s["seqlens_q"])
            if tokens != s["docs"] * s["doc_len"] or len(s["seqlens_q"]) != DOC_COUNT or s["batch"] != DOC_COUNT:
                problems.append(f"{doc_label(s)}: lengths {s['seqlens_q']}")
            if s["heads_q"] * s["head_dim_qk"] != HIDDEN or s["heads_kv"] != s["heads_q"]:
                problems.append(f"{doc_label(s)}: heads {s['heads_q']}/{s['heads_kv']}")
            # The exact pairs (each document within itself; causal: L (L + 1) / 2 per document) against
            # the grid's count that doc_flops uses (causal: half of L^2).
            pairs = spec_pairs(s)
            exact = 2.0 * pairs * 2 * s["head_dim_qk"] * (2.5 if op == "bwd_varlen" else 1.0)
            L = s["doc_len"]
            want = exact * (L / (L + 1) if s["causal"] else 1.0)
            if abs(doc_flops(s) / want - 1) > 1e-12:
                problems.append(f"{doc_label(s)}: FLOPs {doc_flops(s)} vs {want} from {pairs} pairs")
    for op in GQA_OPS + DOC_OPS:
        if op not in OPS or op not in ALL_OPS:
            problems.append(f"{op}: not selectable by --ops")
    return problems


# The varlen-document check on the CPU: 4 documents of 64 tokens, 2 heads, d 32.
DOC_STAND_IN = {"doc_len": 64, "head_dim": 32, "docs": 4, "heads": 2}


def doc_stand_in_checks(report):
    """doc_check against the torch stand-in (must pass) and against stand-ins that treat the packing as
    one sequence (varlen) or drop causal (must fail), forward and backward; then the flex document mask:
    its pairs are the rows' exact pairs, and (eager flex_attention on the CPU, where this torch has it) its
    output through the block mask and the layout conversions equals the reference's."""
    saved = common.DEVICE
    common.DEVICE = "cpu"
    torch.manual_seed(0)
    try:
        c = DOC_STAND_IN
        for op in DOC_OPS:
            backward = op == "bwd_varlen"
            for causal in (False, True):
                spec = doc_spec(op, c["doc_len"], c["head_dim"], causal, docs=c["docs"], heads=c["heads"])
                drops = [None, "varlen"] + (["causal"] if causal else [])
                for drop in drops:
                    lib = TorchStandIn(drop, ("bwd",) if backward else ("fwd",))
                    t = feature_tensors(spec)
                    if backward:
                        t["dout"] = torch.randn_like(t["out"])
                    failure, _, _ = doc_check(spec, lib, backward, t, doc_plain_tensors(spec, t))
                    what = f"{op} causal={int(causal)}: " + ("the stand-in passes the check" if drop is None
                                                               else f"a stand-in ignoring {drop} fails the check")
                    report((failure is None) == (drop is None), what + (f" ({failure[:100]})" if failure else ""))
        # The flex document mask, evaluated on every (q, kv) pair.
        for causal in (False, True):
            spec = doc_spec("fwd_varlen", c["doc_len"], c["head_dim"], causal, docs=c["docs"], heads=c["heads"])
            tokens = c["docs"] * c["doc_len"]
            doc_ids = torch.arange(tokens, dtype=torch.int32) // c["doc_len"]
            idx = torch.arange(tokens)
            mask = flex_document_mask(doc_ids, causal)(0, 0, idx[:, None], idx[None, :])
            report(int(mask.sum()) * spec["heads_q"] == spec_pairs(spec),
                   f"flex document mask causal={int(causal)}: {int(mask.sum())} pairs per head = the row's exact count")
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        except ImportError as e:
            print(f"  skip   flex on the CPU (no FlexAttention in this torch: {e})")
            return
        for causal in (False, True):
            spec = doc_spec("fwd_varlen", c["doc_len"], c["head_dim"], causal, docs=c["docs"], heads=c["heads"])
            tokens = c["docs"] * c["doc_len"]
            doc_ids = torch.arange(tokens, dtype=torch.int32) // c["doc_len"]
            t = feature_tensors(spec)
            try:
                bm = create_block_mask(flex_document_mask(doc_ids, causal), B=None, H=None, Q_LEN=tokens,
                                       KV_LEN=tokens, device="cpu", BLOCK_SIZE=32)
                with warnings.catch_warnings():  # "called without torch.compile": meant here
                    warnings.simplefilter("ignore")
                    out = flex_attention(*(to_bhsd(t[n]).float() for n in ("q", "k", "v")), block_mask=bm)
            except Exception as e:  # noqa: BLE001
                print(f"  skip   eager flex on the CPU causal={int(causal)} ({type(e).__name__}: {str(e)[:120]})")
                continue
            ref, _, _ = doc_reference(spec, t, torch.float32)
            err = max_abs_diff(out, doc_to_bhsd(ref))
            report(err < 1e-4, f"eager flex with the document block mask causal={int(causal)} = the reference "
                               f"(max abs diff {err:.2g})")
    finally:
        common.DEVICE = saved


def write_results_problems():
    """Three runs into one file, as a session does them: bf16 at head dim 192, then fp16 at 64, then bf16 at
    64 with the GQA op. Every row of the first two must survive the third except the one it replaces."""
    import json
    from . import report
    saved = (common.GRID_DTYPES[:], common.HEAD_DIMS[:])
    row = lambda op, dtype, d, tag: dict(op=op, dtype=dtype, head_dim=d, impl="aotk", tag=tag)  # noqa: E731
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "results.json")
            for dtypes, dims, ops, rows in (
                    (["bf16"], [192], {"bwd"}, [row("bwd", "bf16", 192, 1), row("bwd", "bf16", 64, 1)]),
                    (["fp16"], [64], {"bwd", "sel_fwd"}, [row("bwd", "fp16", 64, 2), row("sel_fwd", "bf16", 0, 2)]),
                    (["bf16"], [64], {"bwd", "bwd_gqa"}, [row("bwd", "bf16", 64, 3), row("bwd_gqa", "bf16", 128, 3)])):
                common.GRID_DTYPES[:], common.HEAD_DIMS[:] = dtypes, dims
                report.write_results(path, {"rows": rows}, ops)
            with open(path) as f:
                got = sorted((r["op"], r["dtype"], r["head_dim"], r["tag"]) for r in json.load(f)["rows"])
    finally:
        common.GRID_DTYPES[:], common.HEAD_DIMS[:] = saved
    want = sorted([("bwd", "bf16", 192, 1), ("bwd", "fp16", 64, 2), ("sel_fwd", "bf16", 0, 2),
                   ("bwd", "bf16", 64, 3), ("bwd_gqa", "bf16", 128, 3)])
    return [] if got == want else [f"rows {got}, expected {want}"]


def self_check():
    """Checks what needs no GPU. Without torch: the ctypes layout, the pair counts, the case list.
    With torch (CPU): also the reference's mask, and every feature row's check against a stand-in."""
    passed = failed = skipped = 0

    def report(ok, what):
        nonlocal passed, failed
        passed += bool(ok)
        failed += not ok
        print(f"  {'ok    ' if ok else 'FAILED'} {what}", flush=True)

    # 1. The ctypes structs against the C header.
    problems = ctypes_layout_problems()
    if problems is None:
        skipped += 1
        print("  skip   ctypes layout (no C compiler or include/aotk.h here)")
    else:
        report(not problems, "ctypes structs match include/aotk.h (sizes and every offset)"
               + (": " + "; ".join(problems) if problems else ""))

    # 2. sequence_pairs against the brute-force count, on small sizes with every mask kind.
    rng = random.Random(1)
    configs = []
    for _ in range(1500):
        sq, sk = rng.randint(1, 24), rng.randint(1, 24)
        causal = rng.random() < 0.4
        align = rng.choice([AOTK_ALIGN_BOTTOM_RIGHT, AOTK_ALIGN_TOP_LEFT])
        wl = rng.choice([-1, -1, 0, 1, 2, 3, 5, 8, 30])
        wr = rng.choice([-1, 0]) if causal else rng.choice([-1, -1, 0, 1, 2, 4, 7, 30])
        configs.append((sq, sk, causal, align, wl, wr))
    bad = [c for c in configs if sequence_pairs(*c) != brute_force_pairs(*c)]
    report(not bad, f"sequence_pairs = brute-force count on {len(configs)} random small masks"
           + (f"; first mismatch {bad[0]}: {sequence_pairs(*bad[0])} vs {brute_force_pairs(*bad[0])}" if bad else ""))

    # 3. Closed forms at the benchmark's sizes.
    n, w = 16384, WINDOW_CAUSAL_LEFT
    closed = [
        ("plain 16384^2", (n, n, False, 0, -1, -1), n * n),
        ("causal square", (n, n, True, 0, -1, -1), n * (n + 1) // 2),
        ("causal top-left, 8192 q over 16384 k", (n // 2, n, True, AOTK_ALIGN_TOP_LEFT, -1, -1),
         (n // 2) * (n // 2 + 1) // 2),
        ("causal bottom-right, 8192 q over 16384 k", (n // 2, n, True, 0, -1, -1),
         (n // 2) * (n // 2) + (n // 2) * (n // 2 + 1) // 2),
        (f"causal window {w} at 16384", (n, n, True, 0, w, 0), w * (w + 1) // 2 + (n - w) * (w + 1)),
        ("window (512, 512) at 16384", (n, n, False, 0, 512, 512),
         n * 1025 - 2 * (512 * 513 // 2)),  # 1025 keys per row, minus what the two edges cut off
    ]
    for name, args, expected in closed:
        got = sequence_pairs(*args)
        report(got == expected, f"{name}: {got} pairs (closed form {expected})")

    # 4. Varlen lengths.
    for num_seqs, total, seed in ((16, 16384, VARLEN_SEED + 16384), (64, 16384, VARLEN_SEED + 4096),
                                  (features.CHECK_VARLEN_SEQS,
                                   features.CHECK_VARLEN_SEQS * features.CHECK_TOKENS // 4, VARLEN_SEED)):
        lengths = varlen_lengths(num_seqs, total, seed)
        spread = VARLEN_SPREAD[1] / VARLEN_SPREAD[0]
        ok = (len(lengths) == num_seqs and sum(lengths) == total and min(lengths) >= 1
              and lengths == varlen_lengths(num_seqs, total, seed)
              and max(lengths) - 1 <= spread * (min(lengths) + 1))
        report(ok, f"varlen_lengths({num_seqs}, {total}): sum, spread, repeatable "
                   f"(min {min(lengths)}, max {max(lengths)})")

    # 5. The feature rows: baselines first, FLOPs, check sizes.
    for op in ("fwd_feat", "bwd_feat"):
        specs = list(feature_cases(op, FEATURE_GRID_SEQLENS, FEATURE_HEAD_DIMS + [64]))
        problems, seen_base = [], set()
        for spec in specs:
            key = (spec["grid_seqlen"], spec["head_dim_qk"], spec["head_dim_v"])
            if spec["role"] == "base":
                seen_base.add(key)
                anchors_count = 4.0 * spec["batch"] * spec["heads_q"] * spec["seqlen_q"] * spec["seqlen_k"] * \
                    (spec["head_dim_qk"] + spec["head_dim_v"]) / 2
                if feature_flops(spec) != anchors_count * (2.5 if op == "bwd_feat" else 1.0):
                    problems.append(f"{feature_label(spec)}: FLOPs {feature_flops(spec)} vs anchors.md {anchors_count}")
            elif key not in seen_base:
                problems.append(f"{feature_label(spec)}: no plain row of its head dim before it")
            if not 0 < spec_pairs(spec) <= spec_full_pairs(spec):
                problems.append(f"{feature_label(spec)}: pairs {spec_pairs(spec)}")
            if spec["seqlens_q"] is not None and sum(spec["seqlens_q"]) != TOTAL_TOKENS:
                problems.append(f"{feature_label(spec)}: varlen tokens {sum(spec['seqlens_q'])} != {TOTAL_TOKENS}")
            if spec["causal"] and spec["window_right"] > 0:
                problems.append(f"{feature_label(spec)}: causal with window_right > 0 (aotk refuses it)")
            c = check_spec(spec)
            if max(c["seqlen_q"], c["seqlen_k"]) > features.CHECK_TOKENS or c["heads_q"] > features.CHECK_HEADS:
                problems.append(f"{feature_label(spec)}: check size {c['seqlen_q']}x{c['seqlen_k']}x{c['heads_q']}")
            if (c["feature"], c["causal"], c["causal_align"], c["window_left"], c["softcap"], c["alibi"], c["sinks"],
                    c["dropout_p"], c["seqlens_q"] is None) != (spec["feature"], spec["causal"], spec["causal_align"],
                                                                spec["window_left"], spec["softcap"], spec["alibi"],
                                                                spec["sinks"], spec["dropout_p"],
                                                                spec["seqlens_q"] is None):
                problems.append(f"{feature_label(spec)}: the check's version lost a feature")
        names = [(s["grid_seqlen"], s["head_dim_qk"], s["head_dim_v"], s["feature"]) for s in specs]
        if len(set(names)) != len(names):
            problems.append("two rows share (grid seqlen, head dims, feature)")
        report(not problems, f"{op}: {len(specs)} rows, baselines first, FLOPs, check sizes"
               + ("; " + "; ".join(problems[:5]) if problems else ""))

    # 6. The selection rows: the key-count rule against a brute-force count, the case list and bars.
    rng = random.Random(2)
    bad = []
    for _ in range(500):
        block_size, seqlen_k = rng.choice([4, 8, 32]), rng.randint(1, 200)
        blocks = [rng.randint(-2, seqlen_k // block_size + 1) for _ in range(rng.randint(1, 6))]
        position = rng.randint(0, seqlen_k - 1)
        if len(sel_key_positions(blocks, position, block_size, seqlen_k)) != \
                sel_brute_force_key_count(blocks, position, block_size, seqlen_k):
            bad.append((blocks, position, block_size, seqlen_k))
    report(not bad, "sel_key_positions = brute-force count of aotk.h's J(t, h) on 500 random rows"
           + (f"; first mismatch {bad[0]}" if bad else ""))
    problems = sel_case_problems()
    report(not problems, f"selection rows: {len(SEL_SEQLENS)} per op, bars at "
           f"{sorted({n for _, n in SEL_BARS})} tokens, FLOP counts" + ("; " + "; ".join(problems) if problems else ""))
    expected = {n: SEL_HEADS_KV * sel_expected_keys(n, SEL_BLOCK_SIZE, SEL_SLOTS) for n in SEL_SEQLENS}
    print("         expected keys per query: " + ", ".join(
        f"{n // 1024}k {e / (n * SEL_HEADS_KV):.0f} (density {e / (SEL_HEADS_KV * n * (n + 1) / 2):.3f})"
        for n, e in expected.items()))

    # 7. With torch (CPU is enough): the reference's mask keeps exactly the pairs counted.
    if torch is None:
        skipped += 1
        print("  skip   reference mask vs pair count (torch not installed here)")
    else:
        bad = []
        for sq, sk, causal, align, wl, wr in configs[:300]:
            spec = {"causal": causal, "causal_align": align, "window_left": wl, "window_right": wr}
            visible, _ = reference_mask(sq, sk, spec, "cpu")
            if int(visible.sum()) != sequence_pairs(sq, sk, causal, align, wl, wr):
                bad.append((sq, sk, causal, align, wl, wr))
        report(not bad, "reference_mask keeps exactly sequence_pairs pairs on 300 small masks"
               + (f"; first mismatch {bad[0]}" if bad else ""))

    # 8. With torch: the feature checks against a torch stand-in for libaotk (must pass) and against
    # stand-ins that each ignore one feature (must fail); the same for the selection rows' checks.
    if torch is not None:
        stand_in_checks(report)
        sel_stand_in_checks(report)

    # 8b. Issue 12's NSA index distributions (pure Python): their rules, one row at a time.
    problems = sel_nsa_distribution_problems()
    report(not problems, f"selection index distributions {', '.join(SEL_INDEX_DISTRIBUTIONS[1:])}: fixed blocks, "
           f"distinct causal picks, the topk draw's dropped future blocks, repeatable, rows per distribution"
           + ("; " + "; ".join(problems[:5]) if problems else ""))

    # 9. The GQA and varlen-document rows (issue 11): shapes, tokens, FLOPs against exact pair counts, --ops.
    problems = new_rows_problems()
    report(not problems, f"GQA rows ({', '.join(GQA_OPS)}) and varlen document rows ({', '.join(DOC_OPS)}): "
           f"shapes, tokens, FLOP counts, selectable by --ops" + ("; " + "; ".join(problems[:5]) if problems else ""))
    # 10. With torch: the varlen-document check against the stand-in and its mutants, the flex document mask.
    if torch is None:
        skipped += 1
        print("  skip   varlen document checks against the stand-in (torch not installed here)")
    else:
        doc_stand_in_checks(report)

    # 11. write_results keeps the grid rows of dtypes and head dims a run left out, and replaces the rest.
    problems = write_results_problems()
    report(not problems, "write_results keeps other dtypes' and head dims' grid rows and other ops' rows"
           + ("; " + "; ".join(problems) if problems else ""))

    print(f"self-check: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0
