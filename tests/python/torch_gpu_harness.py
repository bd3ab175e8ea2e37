"""What tests/python/test_torch_gpu.py and test_torch_decode_gpu.py share: torch (or exit 77 without it),
the case runner (ok / FAIL / skip, counted), the float64 attention reference with its same-precision twin,
the error rule, and main() over a list of cases.

The error rule follows flash-attention's tests: the error of aotk against a float64 reference must be at
most twice the error of the same computation done in the inputs' dtype (flash-attn's attention_ref with
upcast=False: scores, softmax output and P.V rounded to the dtype) plus a small floor; gradients likewise,
with the floor scaled by the gradient's magnitude.
"""
import argparse
import math
import os
import random
import sys
import time
import traceback

try:
    import torch
except ImportError as e:
    print(f"torch is not importable ({e})")
    print("0 passed, 0 failed, 1 skipped")
    sys.exit(77)

import aotk

ARGS = argparse.Namespace(seed=0, quick=False, filter="")
RESULTS = {"passed": 0, "failed": 0, "skipped": 0}
DEVICE = "cuda"


class Skip(Exception):
    pass


def case(fn):
    """Runs one named case, prints ok/FAIL with its details, counts it."""
    name = fn.__name__
    t0 = time.time()
    try:
        detail = fn()
    except Skip as e:
        RESULTS["skipped"] += 1
        print(f"skip {name}: {e}", flush=True)
        return
    except Exception:  # noqa: BLE001: every failure is reported and counted
        RESULTS["failed"] += 1
        print(f"FAIL {name} ({time.time() - t0:.1f} s):\n{traceback.format_exc()}", flush=True)
        return
    RESULTS["passed"] += 1
    print(f"ok   {name} ({time.time() - t0:.1f} s){': ' + detail if detail else ''}", flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


# ---------------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------------

def visible_mask(seqlen_q, seqlen_k, causal, align_bottom_right, window_left, window_right, device):
    """bool [seqlen_q, seqlen_k]: row i sees key j (aotk.h's rule: diag = seqlen_k - seqlen_q when
    bottom-right, 0 when top-left; causal is window_right = 0)."""
    i = torch.arange(seqlen_q, device=device).view(-1, 1)
    j = torch.arange(seqlen_k, device=device).view(1, -1)
    diag = seqlen_k - seqlen_q if align_bottom_right else 0
    right = 0 if causal else window_right
    ok = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool, device=device)
    if window_left >= 0:
        ok &= j >= i + diag - window_left
    if right >= 0:
        ok &= j <= i + diag + right
    return ok


def attention_ref(q, k, v, *, scale=None, causal=False, align_bottom_right=True, window=(-1, -1), softcap=0.0,
                  alibi_slopes=None, dropout_keep=None, dropout_p=0.0, upcast=True, key_mask=None):
    """Attention in flash-attn's layout (q [b, sq, hq, d], k/v [b, sk, hkv, d]). upcast=True: in float64;
    upcast=False: in the inputs' dtype, rounding where a plain implementation of that dtype would.
    key_mask: optional bool [b or 1, hq, sq, sk] replacing the causal/window mask (selection attention).
    dropout_keep: uint8/bool [b, hq, sq, sk]. Rows that see no key give 0. Returns out [b, sq, hq, dv]."""
    dtype_out = q.dtype
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    k = k.repeat_interleave(g, dim=2)
    v = v.repeat_interleave(g, dim=2)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    scores = torch.einsum("bthd,bshd->bhts", q * scale, k)
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(scores.dtype)
        slopes = slopes.view(1, hq, 1, 1) if slopes.dim() == 1 else slopes.view(b, hq, 1, 1)
        i = torch.arange(sq, device=q.device).view(-1, 1)
        j = torch.arange(sk, device=q.device).view(1, -1)
        diag = sk - sq if align_bottom_right else 0
        scores = scores - slopes * (i + diag - j).abs().to(scores.dtype)
    if key_mask is not None:
        visible = key_mask.expand(b, hq, sq, sk)
    else:
        visible = visible_mask(sq, sk, causal, align_bottom_right, window[0], window[1], q.device).view(1, 1, sq, sk)
    # A row that sees no key gives 0 (aotk's rule) and no gradient: its scores are made finite before the
    # softmax (all -inf would give NaN, whose gradient is NaN even after masking) and its weights zeroed.
    row_sees_a_key = visible.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~visible, float("-inf")).masked_fill(~row_sees_a_key, 0.0)
    attn = torch.softmax(scores.float() if not upcast else scores, dim=-1)
    attn = attn.masked_fill(~row_sees_a_key, 0.0)
    if dropout_keep is not None:
        # aotk drops with probability t / 256, t = floor(256 p + 1/2) (at most 255), and scales by its inverse.
        attn = attn * dropout_keep.to(attn.dtype) / (1.0 - min(math.floor(256 * dropout_p + 0.5), 255) / 256)
    attn = attn.to(v.dtype)
    out = torch.einsum("bhts,bshd->bthd", attn, v)
    return out if upcast else out.to(dtype_out)


def max_err(a, b):
    d = (a.double() - b.double()).abs()
    if torch.isnan(d).any():
        return float("nan")
    return d.max().item() if d.numel() else 0.0


def check_close(name, got, ref64, ref_lp, floor=1e-3, scale_floor=False):
    """|got - ref64| <= 2 |ref_lp - ref64| + floor (floor * max(1, max|ref64|) for gradients). Returns
    the ratio of the error to its bound."""
    err = max_err(got, ref64)
    lp_err = max_err(ref_lp, ref64)
    f = floor * max(1.0, ref64.abs().max().item() if ref64.numel() else 1.0) if scale_floor else floor
    bound = 2 * lp_err + f
    expect(got.shape == ref64.shape, f"{name}: shape {tuple(got.shape)}, reference {tuple(ref64.shape)}")
    expect(err == err and err <= bound, f"{name}: max error {err:.3e} > bound {bound:.3e} (same-dtype "
                                        f"reference's error {lp_err:.3e})")
    return err / bound if bound > 0 else 0.0


def run_and_check(label, fn_aotk, fn_ref, inputs, dout_shape_fn=None, grads=True):
    """Runs fn_aotk(*inputs) and fn_ref on float64 and same-dtype copies; checks out and each input's
    gradient. Returns the worst error/bound ratio."""
    xs = [x.detach().clone().requires_grad_(grads) for x in inputs]
    out = fn_aotk(*xs)
    x64 = [x.detach().double().requires_grad_(grads) for x in inputs]
    out64 = fn_ref(*x64, upcast=True)
    xlp = [x.detach().clone().requires_grad_(grads) for x in inputs]
    outlp = fn_ref(*xlp, upcast=False)
    worst = check_close(f"{label} out", out, out64, outlp)
    if grads:
        dout = torch.randn_like(out)
        out.backward(dout)
        out64.backward(dout.double())
        outlp.backward(dout)
        for i, (x, a, b) in enumerate(zip(xs, x64, xlp)):
            worst = max(worst, check_close(f"{label} grad[{i}]", x.grad, a.grad, b.grad, floor=1e-3, scale_floor=True))
    return worst


def rand(*shape, dtype):
    return torch.randn(*shape, device=DEVICE, dtype=dtype)


def main(doc, cases):
    """Parses --seed, --quick and --filter, runs the cases whose names contain the filter, prints the
    counts; the exit status: 0, 1 when a case failed, 77 without a CUDA device."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("AOTK_TEST_SEED", random.randrange(1 << 30))))
    ap.add_argument("--quick", action="store_true", help="fewer random cases")
    ap.add_argument("--filter", default=os.environ.get("AOTK_TEST_FILTER", ""),
                    help="run only the cases whose names contain this text (default: $AOTK_TEST_FILTER)")
    vars(ARGS).update(vars(ap.parse_args()))
    if not torch.cuda.is_available():
        print("torch sees no CUDA device")
        print("0 passed, 0 failed, 1 skipped")
        return 77
    torch.manual_seed(ARGS.seed)
    print(f"seed {ARGS.seed} (AOTK_TEST_SEED={ARGS.seed} replays it); torch {torch.__version__}; "
          f"{torch.cuda.get_device_name()}; aotk {aotk.version()} from {aotk.library_path()}", flush=True)
    for fn in cases:
        if ARGS.filter in fn.__name__:
            case(fn)
    print(f"{RESULTS['passed']} passed, {RESULTS['failed']} failed, {RESULTS['skipped']} skipped")
    return 1 if RESULTS["failed"] else 0
