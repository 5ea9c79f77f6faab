#!/usr/bin/env python
"""Linear regression on 1,192 real rows: log earnings against height.

posteriordb's ``earnings`` data (Gelman and Hill, 2007): log annual earnings against height. Public centring from
domain knowledge: log(earn) - 10 (earnings of the order of exp(10), about 22,000 dollars) and (height - 66) / 4
inches (every row of this set has positive earnings). Program: ``stan_models/linear_regression.stan``;
``grad_clip = 25`` as in the benchmarks. ``algorithm="auto"`` at epsilon 10 against Stan's NUTS: the private
means land within about 0.4 posterior sd of the non-private ones, the private posterior is 1.2-1.6 times wider, and
the chains are close to, but not yet at, Stan's convergence standard (R-hat 1.07; the package warns).
"""
import numpy as np

from _gallery import load, run

d = load("earnings")
height = (np.asarray(d["height"], dtype=float) - 66.0) / 4.0
data = {"N": d["N"], "K": 1, "x": height[:, None], "y": np.log(np.asarray(d["earn"], dtype=float)) - 10.0,
        "prior_sd": 10.0}
run("gallery_earnings_linear", "stan_models/linear_regression.stan", data, bounds={"grad_clip": 25.0},
    inits={"alpha": 0.0, "beta": [0.0], "sigma": 1.0})
