"""Checks, on the CPU, that the Gluon kernels' spreading of the dropout words over their score tiles
gives every element the byte the keep rule names (kernels/attn_common.py, dropout_keep; docs/design.md,
"Dropout"). It emulates the index arithmetic of kernels/attn_fwd_hopper.py (_dropout_rows,
_dropout_apply: S, queries x 128 keys) and kernels/attn_bwd_hopper.py (_dropout_words_t,
_dropout_keep_t: S^T, keys x 64 queries) with symbolic words: join adds a last axis, reshape is
row-major, permute reorders axes. The shapes and orders below are copies of the kernels': change both
together. No GPU, no numpy.

    python3 bench/explore/dropout_spreading_check.py
"""
import itertools


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


def forward(rows, row0, n0):
    def counters(r, k):
        i = row0 + r
        key = 4 * (((r >> 3) & 1) * 4 + ((k >> 3) & 1) * 2 + (k & 1)) + ((k >> 1) & 3) + 4 * (n0 >> 4)
        return key, 4 * (i >> 4) + ((i >> 1) & 3), i & 1
    c = tensor((rows, 16), counters)
    x = join(mapv(c, lambda t: (t[0], t[1], 2 if t[2] else 0)), mapv(c, lambda t: (t[0], t[1], 3 if t[2] else 1)))
    x = spread_bytes(x)
    x = permute(reshape(x, [rows // 16, 2, 8, 2, 4, 2, 2, 2, 2]), [0, 8, 2, 1, 3, 5, 7, 4, 6])
    return sum(x[1][r * 128 + k] != rule(row0 + r, n0 + k) for r in range(rows) for k in range(128))


def backward(rows, n0, m0):
    def counters(r, k):
        key = 4 * ((n0 + r) >> 4) + ((r & 7) >> 1)
        query = 4 * ((m0 >> 4) + 2 * ((r >> 3) & 1) + (k & 1)) + (k >> 1)
        return key, query, r & 1
    c = tensor((rows, 8), counters)
    x = join(mapv(c, lambda t: (t[0], t[1], 1 if t[2] else 0)), mapv(c, lambda t: (t[0], t[1], 3 if t[2] else 2)))
    x = spread_bytes(x)
    x = permute(reshape(x, [rows // 16, 2, 8, 4, 2, 2, 2, 2]), [0, 6, 2, 1, 4, 7, 3, 5])
    return sum(x[1][r * 64 + k] != rule(m0 + k, n0 + r) for r in range(rows) for k in range(64))


if __name__ == "__main__":
    bad = 0
    for rows, row0, n0 in ((64, 0, 0), (64, 192, 512), (64, 64, 128)):
        n = forward(rows, row0, n0)
        print(f"forward  S   {rows} x 128 at query {row0}, key {n0}: {n} elements off the rule")
        bad += n
    for rows, n0, m0 in ((64, 0, 0), (64, 192, 320), (128, 256, 64)):
        n = backward(rows, n0, m0)
        print(f"backward S^T {rows} x 64 at key {n0}, query {m0}: {n} elements off the rule")
        bad += n
    raise SystemExit(1 if bad else 0)
