"""The benchmark of bench_attn.py, in modules: one per group of ops, with what they share and the
self-check. bench/bench_attn.py is the command line; bench/README.md describes the rows."""
