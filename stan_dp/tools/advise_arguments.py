"""The arguments and help of ``stan-dp advise``, apart from the advisor itself.

Building the ``stan-dp`` parser needs these on every start of the command (``stan-dp --help`` included), while
the advisor (``stan_dp.tools.advise``) loads the method registry and the accountant. Keeping the arguments here
lets the command start without them; ``stan_dp.tools.advise`` re-exports every name below.
"""

from __future__ import annotations

import argparse

from ..run_options import add_unit_arguments

__all__ = ["ADVISE_DESCRIPTION", "ADVISE_HELP", "NO_PRIVACY_COST", "add_advise_arguments"]

NO_PRIVACY_COST = ("advise reads only the public data set you gave it: it costs no privacy budget. Its numbers "
                   "describe the public data; the private data's fit will differ as much as the data sets do.")

ADVISE_HELP = "expected error per algorithm, learned on PUBLIC data (costs no privacy)"
ADVISE_DESCRIPTION = ("Run the candidate algorithms on a public or synthetic data set shaped like the private one, "
                      "at the planned budget, against a non-private reference of the public data. " + NO_PRIVACY_COST)


def add_advise_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``stan-dp advise`` (its handler is ``run_advise``): those of ``stan-dp sample`` that shape
    a run (no output files), with the data PUBLIC and the algorithm repeatable."""
    p.add_argument("model", help="Stan program (.stan)")
    p.add_argument("--data", required=True, help="PUBLIC data as a Stan JSON file (never the private rows)")
    p.add_argument("--row-data", metavar="PATH", default=None, help="PUBLIC rows as a Parquet or CSV file, columns "
                   "named like the row variables (then --data holds the other public data)")
    p.add_argument("--epsilon", type=float, required=True, help="the budget you plan for the private run")
    p.add_argument("--delta", type=float, required=True, help="delta you plan for the private run")
    p.add_argument("--chains", type=int, default=4, help="number of chains")
    p.add_argument("--iter-warmup", type=int, default=None, help="warmup iterations per chain (default: each "
                   "algorithm's default run lengths, stan_dp.methods.kernels.run_lengths)")
    p.add_argument("--iter-sampling", type=int, default=None, help="sampling iterations per chain (default: each "
                   "algorithm's default run lengths)")
    p.add_argument("--algorithm", action="append", help="candidate (repeatable; default: all that fit the bounds)")
    p.add_argument("--inits", metavar="JSON|R", help="the public inits planned for the private run, as `stan-dp "
                   "sample --inits` takes them (a JSON file or inline JSON by parameter name, or a number as in "
                   "CmdStan: 0 or a radius R)")
    p.add_argument("--rows", default="N", help="name of the int data variable holding the row count")
    p.add_argument("--row-variables", metavar="A,B,...", help="comma-separated row variables (default: every "
                   "data variable whose first size is the row count)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="any option `stan-dp sample` takes: at least one public clip bound (ratio_clip=, "
                        "grad_clip=, row_bound= or loglik_bounds=[lo,hi]), and algorithm, run-level or warm-start "
                        "options; each candidate gets those it takes (inits= as --inits, threads= for the "
                        "row engine; sample's output-only save_warmup, include_tp, include_gq have no effect here)")
    add_unit_arguments(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the public runs")
