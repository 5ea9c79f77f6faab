#!/usr/bin/env python
"""Linear regression on 434 real rows: a child's test score against the mother's IQ.

posteriordb's ``kidiq`` data (Gelman and Hill, 2007). Both scores are normed to mean 100 and sd 15, so the public
rescaling (score - 100) / 15 puts them on unit scale without reading the rows. Program:
``stan_models/linear_regression.stan`` (normal priors; the private samplers need proper ones). ``grad_clip = 25``
is a public bound on one row's gradient over the region of interest, as in the benchmarks. With 434 rows this
is the smallest case of the gallery: in this run at epsilon 10 the private means land within about one posterior
sd of the non-private ones, the private posterior is 1.6-2.5 times wider, and the chains have not converged
(R-hat 1.75; the package warns). A single run on so few rows varies a lot with the noise: the benchmark's run at
the same epsilon was 5.7 sds off.
"""
import numpy as np

from _gallery import load, run

d = load("kidiq")
x = (np.asarray(d["mom_iq"], dtype=float) - 100.0) / 15.0
y = (np.asarray(d["kid_score"], dtype=float) - 100.0) / 15.0
data = {"N": d["N"], "K": 1, "x": x[:, None], "y": y, "prior_sd": 10.0}
run("gallery_kidiq_linear", "stan_models/linear_regression.stan", data, bounds={"grad_clip": 25.0},
    inits={"alpha": 0.0, "beta": [0.0], "sigma": 1.0})
