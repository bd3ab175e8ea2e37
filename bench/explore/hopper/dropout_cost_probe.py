"""What dropout would cost inside the Gluon forward's consumers: writes a copy of kernels/ whose
attn_fwd_hopper.py draws, in every 128-key softmax step, 8 Philox4x32-7 calls a thread (one per 8 of its
64 scores at 64 x 128, the rate of docs/design.md's planned keep rule), spreads two words of each call
over 8 scores by byte (join, reshape and permute, which compile to register moves: no shared memory),
compares each byte with a threshold the compiler cannot fold (0 at run time, so nothing is dropped and
the output stays checkable) and selects P. Then time it against the tree's kernel:

    python3 bench/explore/hopper/dropout_cost_probe.py /tmp/aotk-dropout-probe
    AOTK_KERNELS_DIR=/tmp/aotk-dropout-probe python3 bench/explore/hopper/fwd_hopper_jit.py --base-kernels kernels \\
        --variants 'plain@base:{}' 'probe:{}' --head-dims 64,128 --seqlens 4096,16384

A cost probe, not the keep rule: its counters are not the rule's. On the H200 (2026-11-28) it ran at
0.55-0.57 of the plain kernel at d64 and 0.62-0.67 at d128 (docs/design.md, "Dropout in the Gluon
consumers: the cost, measured").
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(HERE, "..", "..", "..", "kernels")

# philox7: kernels/attn_hopper_common.py's, which attn_fwd_hopper.py imports.
PROBE = '''

@gluon.jit
def _probe_keep(p, n0, flags, s_layout: gl.constexpr):
    ROWS: gl.constexpr = p.shape[0]
    # A 64 x 16 wgmma accumulator layout: 8 elements a thread, so 8 calls a thread a step.
    L16: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 16, 16])
    ri = gl.arange(0, ROWS, layout=gl.SliceLayout(1, L16))
    ci = gl.arange(0, 16, layout=gl.SliceLayout(0, L16))
    zero = gl.zeros([ROWS, 16], gl.int32, L16)
    c0 = (zero + gl.expand_dims(ci, 0) + n0).to(gl.uint32, bitcast=True)
    c1 = (zero + gl.expand_dims(ri, 1)).to(gl.uint32, bitcast=True)
    c2 = (zero + flags).to(gl.uint32, bitcast=True)
    c3 = (zero + n0 * 3).to(gl.uint32, bitcast=True)
    r0, r1, r2, r3 = philox7(flags.to(gl.uint32, bitcast=True), n0.to(gl.uint32, bitcast=True), c0, c1, c2, c3)
    w = gl.join(r0, r1)
    x = gl.join(gl.join(w & 255, (w >> 8) & 255), gl.join((w >> 16) & 255, w >> 24))
    # Columns 16 q + ... of the 64 x 16 layout (8 b + 2 q + c) and the 3 joined bits to 8 n + 2 q + c of 64 x 128.
    x = gl.permute(x.reshape([ROWS, 2, 4, 2, 2, 2, 2]), [0, 1, 3, 5, 6, 2, 4]).reshape([ROWS, 128])
    keep = gl.convert_layout(x >= (flags >> 30).to(gl.uint32, bitcast=True), s_layout)
    return gl.where(keep, p, 0.0)
'''


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/aotk-dropout-probe"
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(KERNELS, out, ignore=shutil.ignore_patterns("__pycache__"))
    path = os.path.join(out, "attn_fwd_hopper.py")
    src = open(path).read()
    anchor = "\n\n@gluon.jit\ndef _scores("
    step_end = "    l_i = l_i * alpha + gl.sum(p, 1)\n    return p, m_new, l_i, alpha"
    if anchor not in src or step_end not in src:
        sys.exit("kernels/attn_fwd_hopper.py changed: the probe's anchors (_scores, the end of _softmax_step) are gone")
    src = src.replace(anchor, PROBE + anchor, 1)
    src = src.replace(step_end, "    l_i = l_i * alpha + gl.sum(p, 1)\n    if BLOCK_N == 128:\n"
                      "        p = _probe_keep(p, n0, flags, s_layout)\n    return p, m_new, l_i, alpha")
    open(path, "w").write(src)
    print(out)


if __name__ == "__main__":
    main()
