"""The op registry: which function enumerates, runs and counts each op's rows."""
from .grid import bwd_cases, bwd_flops, bwd_run_case, fwd_cases, fwd_flops, fwd_run_case
from .selection import print_sel_table, run_sel_op, sel_cases
from .gqa import gqa_cases, print_gqa_table, run_gqa_op
from .varlen_docs import doc_cases, print_doc_table, run_doc_op

# The op registry. A grid op says how to enumerate its cases, run one case, and count its FLOPs (main's
# loop builds its rows and table, and its geomeans: only the grid ops fwd and bwd are of that kind); an op
# with "run_op" runs all its rows itself, because what a row records depends on what the run drew (the
# selection's FLOPs are counted from its indices) or has columns of its own (GQA's layouts, the varlen
# rows' plain kernel and flex), and "print" prints its own table and bars at the end. The feature ops
# (fwd_feat, bwd_feat) have their own path in main.
OPS = {
    "fwd": {"cases": fwd_cases, "run": fwd_run_case, "flops": fwd_flops},
    "bwd": {"cases": bwd_cases, "run": bwd_run_case, "flops": bwd_flops},
    "fwd_gqa": {"cases": gqa_cases, "run_op": run_gqa_op, "print": print_gqa_table},
    "bwd_gqa": {"cases": gqa_cases, "run_op": run_gqa_op, "print": print_gqa_table},
    "fwd_varlen": {"cases": doc_cases, "run_op": run_doc_op, "print": print_doc_table},
    "bwd_varlen": {"cases": doc_cases, "run_op": run_doc_op, "print": print_doc_table},
    "sel_fwd": {"cases": sel_cases, "run_op": run_sel_op, "print": print_sel_table},
    "sel_bwd": {"cases": sel_cases, "run_op": run_sel_op, "print": print_sel_table},
}


ALL_OPS = list(OPS) + ["fwd_feat", "bwd_feat"]
