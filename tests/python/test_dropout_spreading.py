"""Checks, on the CPU, that the Gluon kernels' spreading of the dropout words over their score tiles
gives every element the byte the keep rule names (kernels/attn_common.py, dropout_keep; docs/design.md,
"Dropout"). It emulates the index arithmetic of kernels/attn_fwd_hopper.py (_dropout_rows,
_dropout_apply: S, queries x 128 keys) and kernels/attn_bwd_hopper.py (_dropout_words_t,
_dropout_keep_t: S^T, keys x 64 queries) with symbolic words: join adds a last axis, reshape is
row-major, permute reorders axes. The reshape and permute of each are read from the kernel's source; the
counters and the joins are copies (checked to be there verbatim): a kernel whose spreading changes fails
here until this emulation follows it. No GPU, no numpy, no Triton.

    python3 tests/python/test_dropout_spreading.py
"""
import itertools
import os
import re
import sys

KERNELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernels")
BYTE_JOIN = "gl.join(gl.join(x & 255, (x >> 8) & 255), gl.join((x >> 16) & 255, x >> 24))"
SPREAD = re.compile(r"gl\.permute\(x\.reshape\(\[ROWS // 16, ([\d, ]+)\]\), \[([\d, ]+)\]\)\.reshape\(\[ROWS, (\d+)\]\)")


def kernel_spreading(source, function, word_join):
    """(the inner reshape dims, the permutation, the columns) of `function` in kernels/`source`, after
    checking that its word and byte joins are the ones emulated here."""
    with open(os.path.join(KERNELS, source)) as f:
        text = f.read()
    start = text.index(f"def {function}(")
    end = text.find("\n@gluon.jit", start)
    body = text[start:end if end >= 0 else len(text)]
    for line in (word_join, BYTE_JOIN):
        if line not in body:
            raise SystemExit(f"{source}: {function} no longer has `{line}`: update this emulation")
    m = SPREAD.search(body)
    if m is None:
        raise SystemExit(f"{source}: {function}'s reshape and permute not found: update this emulation")
    dims = [int(x) for x in m.group(1).split(",")]
    order = [int(x) for x in m.group(2).split(",")]
    return dims, order, int(m.group(3))


def tensor(shape, fn):
    return (tuple(shape), [fn(*idx) for idx in itertools.product(*(range(n) for n in shape))])


def join(a, b):
    shape, xs = a
    return (shape + (2, ), [v for pair in zip(xs, b[1]) for v in pair])


def mapv(a, fn):
    return (a[0], [fn(v) for v in a[1]])


def reshape(a, shape):
    return (tuple(shape), a[1])


def permute(a, order):
    shape, xs = a
    new_shape = tuple(shape[o] for o in order)
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    out = []
    for idx in itertools.product(*(range(n) for n in new_shape)):
        out.append(xs[sum(idx[k] * strides[order[k]] for k in range(len(order)))])
    return (new_shape, out)


def spread_bytes(x):
    # x & 255, x >> 8, ... as symbolic (counter, word) + byte index; joined as the kernels join them.
    b = [mapv(x, lambda v, i=i: v + (i, )) for i in range(4)]
    return join(join(b[0], b[1]), join(b[2], b[3]))


def rule(i, j):
    """(key counter, query counter, word, byte) of query i and key j."""
    return (4 * (j >> 4) + ((j >> 1) & 3), 4 * (i >> 4) + ((i >> 1) & 3), 2 * (i & 1) + (j & 1),
            2 * ((i >> 3) & 1) + ((j >> 3) & 1))


def spread(counters, words, spreading, rows, cols):
    """The kernels' spreading of `counters` ([rows, k] of (key counter, query counter, word selector)):
    the two words `words` picks joined, their bytes joined, then the kernel's reshape and permute, as a
    flat row-major list of [rows, cols] (key counter, query counter, word, byte)."""
    dims, order, kernel_cols = spreading
    x = join(mapv(counters, lambda t: (t[0], t[1], words[0][t[2]])),
             mapv(counters, lambda t: (t[0], t[1], words[1][t[2]])))
    x = permute(reshape(spread_bytes(x), [rows // 16] + dims), order)
    assert kernel_cols == cols and len(x[1]) == rows * cols
    return x[1]


def forward(rows, row0, n0, spreading):
    """S (queries x 128 keys): the row's e picks words 0/1 or 2/3."""
    def counters(r, k):
        i = row0 + r
        key = 4 * (((r >> 3) & 1) * 4 + ((k >> 3) & 1) * 2 + (k & 1)) + ((k >> 1) & 3) + 4 * (n0 >> 4)
        return key, 4 * (i >> 4) + ((i >> 1) & 3), i & 1
    x = spread(tensor((rows, 16), counters), ((0, 2), (1, 3)), spreading, rows, 128)
    return sum(x[r * 128 + k] != rule(row0 + r, n0 + k) for r in range(rows) for k in range(128))


def backward(rows, n0, m0, spreading):
    """S^T (keys x 64 queries): the key's c picks words c and 2 + c."""
    def counters(r, k):
        key = 4 * ((n0 + r) >> 4) + ((r & 7) >> 1)
        query = 4 * ((m0 >> 4) + 2 * ((r >> 3) & 1) + (k & 1)) + (k >> 1)
        return key, query, r & 1
    x = spread(tensor((rows, 8), counters), ((0, 1), (2, 3)), spreading, rows, 64)
    return sum(x[r * 64 + k] != rule(m0 + k, n0 + r) for r in range(rows) for k in range(64))


if __name__ == "__main__":
    fwd = kernel_spreading("attn_fwd_hopper.py", "_dropout_apply",
                           "x = gl.join(gl.where(odd, w2, w0), gl.where(odd, w3, w1))")
    bwd = kernel_spreading("attn_bwd_hopper.py", "_dropout_keep_t", "x = gl.join(words[0], words[1])")
    bad = 0
    for rows, row0, n0 in ((64, 0, 0), (64, 192, 512), (64, 64, 128)):
        n = forward(rows, row0, n0, fwd)
        print(f"forward  S   {rows} x 128 at query {row0}, key {n0}: {n} elements off the rule")
        bad += n
    for rows, n0, m0 in ((64, 0, 0), (64, 192, 320), (128, 256, 64)):
        n = backward(rows, n0, m0, bwd)
        print(f"backward S^T {rows} x 64 at key {n0}, query {m0}: {n} elements off the rule")
        bad += n
    print("ok" if not bad else "FAIL", flush=True)
    sys.exit(1 if bad else 0)
