#!/usr/bin/env python
"""Logistic regression on 1,179 real rows: presidential vote against income.

posteriordb's ``nes_logit`` data (the 1992 National Election Study, as in Gelman and Hill, 2007): a vote for the
Republican candidate against income on a 1-5 scale. Program: ``stan_models/logistic.stan``. Income is at most 5,
so ||(1, x)|| <= sqrt(26) < 6 = ``grad_clip`` for any respondent. ``algorithm="auto"`` at epsilon 10 against
Stan's NUTS: the private means land within about a quarter of a posterior sd of the non-private ones, and the private
posterior is about 2.6 times wider, because its intervals carry the privacy noise (R-hat 1.08: close, but
not converged by Stan's 1.01 standard, and the package warns so).
"""
import numpy as np

from _gallery import load, run

d = load("nes_logit_data")
data = {"N": d["N"], "K": 1, "x": np.asarray(d["income"], dtype=float)[:, None],
        "y": np.asarray(d["vote"], dtype=int), "prior_sd": 2.5}
run("gallery_nes_logit", "stan_models/logistic.stan", data, bounds={"grad_clip": 6.0},
    inits={"alpha": 0.0, "beta": [0.0]})
