"""Tests of stan_dp.compare: per-parameter table, KS, MMD (Räisä et al.'s metric), Stan CSV input, plots.

Tolerances for random quantities come from explicit sampling-error bounds stated in each test.

Two facts about the biased MMD estimate ``MMD_b`` with a fixed kernel ``0 <= k <= 1`` and i.i.d. samples of
sizes m = n are used below:

* ``E[MMD_b^2] = MMD^2 + (1 - kappa_p)/m + (1 - kappa_q)/m`` (kappa = mean kernel value between two
  independent draws), so under p = q, ``E[MMD_b] <= sqrt(2/m)``, and under p != q,
  ``MMD <= E[MMD_b] <= MMD + 1/(m MMD)``.
* ``MMD_b`` is a norm of a difference of mean embeddings; replacing one of the 2m draws moves it by at most
  ``sqrt(2)/m``. McDiarmid's inequality gives ``P(|MMD_b - E MMD_b| > eps) <= 2 exp(-m eps^2 / 2)``, i.e.
  ``eps = sqrt(2 log(2/alpha) / m)`` at level alpha.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

import arviz as az  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")

from scipy import integrate, stats  # noqa: E402

from stan_dp.output.arviz_compat import fit_from_dict  # noqa: E402
from stan_dp.output.compare import (  # noqa: E402
    compare,
    ks_distance,
    median_bandwidth,
    mmd,
    plot_compare,
    read_stan_csv,
)

ALPHA = 1e-6  # failure probability allowed for each probabilistic bound below


def _mcdiarmid_eps(m: int, alpha: float = ALPHA) -> float:
    return math.sqrt(2.0 * math.log(2.0 / alpha) / m)


def _idata(rng, chains=4, draws=500, shift=0.0, coords=None, dims=None):
    post = {
        "mu": rng.normal(shift, 1.0, size=(chains, draws)),
        "beta": rng.normal(shift, 1.0, size=(chains, draws, 3)),
        "L": rng.normal(shift, 1.0, size=(chains, draws, 2, 2)),
    }
    return fit_from_dict({"posterior": post}, coords=coords, dims=dims)


def _gaussian_mmd(d: int, shift: float, h: float) -> float:
    """Population MMD between N(0, I_d) and N(shift e_1, I_d) with kernel exp(-|x-y|^2 / (2 h^2))."""
    c = (h * h / (h * h + 2.0)) ** (d / 2.0)
    return math.sqrt(2.0 * c * (1.0 - math.exp(-shift * shift / (2.0 * (h * h + 2.0)))))


# ---------------------------------------------------------------------------------------------------------
def test_one_row_per_scalar_parameter_with_summary_labels():
    """A scalar, a vector with named coords and a 2x2 matrix give 1 + 3 + 4 rows, labelled and ordered
    exactly as az.summary labels them, with means and sds (ddof=1) equal to az.summary's."""
    rng = np.random.default_rng(0)
    fit = _idata(rng, coords={"school": ["a", "b", "c"]}, dims={"beta": ["school"]})
    ref = _idata(rng)
    df = compare(fit, ref)
    summary = az.summary(fit, kind="stats", round_to="none")
    assert len(df) == 8
    assert list(df.index) == list(summary.index)
    assert "beta[b]" in df.index and "L[0, 1]" in df.index and "mu" in df.index
    assert list(df.columns) == ["mean_private", "mean_reference", "sd_private", "sd_reference",
                                "mean_diff_sd", "sd_ratio", "ks"]
    np.testing.assert_allclose(df["mean_private"], summary["mean"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(df["sd_private"], summary["sd"], rtol=1e-12)
    # Matrix layout: L[0, 1] is the (0, 1) element of the posterior array, not a transposed one.
    np.testing.assert_allclose(df.loc["L[0, 1]", "mean_reference"],
                               ref.posterior["L"].values[..., 0, 1].mean(), rtol=1e-12)
    for key in ("mmd", "mmd_bandwidth", "n_draws_private", "n_draws_reference"):
        assert key in df.attrs
    assert df.attrs["n_draws_private"] == 2000


def test_fit_compared_with_itself_is_identical():
    """Comparing a fit with itself gives MMD exactly 0, KS 0, mean difference 0 and sd ratio 1."""
    fit = _idata(np.random.default_rng(1))
    df = compare(fit, fit)
    assert df.attrs["mmd"] == 0.0
    assert mmd(fit, fit) == 0.0
    np.testing.assert_array_equal(df["ks"], 0.0)
    np.testing.assert_array_equal(df["mean_diff_sd"], 0.0)
    np.testing.assert_allclose(df["sd_ratio"], 1.0, rtol=1e-15)


def test_mean_difference_in_sds_and_sd_ratio_on_constructed_data():
    """fit = ref + 0.5 sd(ref) gives mean_diff_sd 0.5 and sd_ratio 1; fit = 3 ref + 1 gives sd_ratio 3 and
    mean_diff_sd (2 mean(ref) + 1) / sd(ref); exact up to rounding."""
    rng = np.random.default_rng(2)
    r = rng.gamma(2.0, 1.5, size=(2, 300))
    sd = r.std(ddof=1)
    ref = fit_from_dict({"posterior": {"x": r}})
    shifted = compare(fit_from_dict({"posterior": {"x": r + 0.5 * sd}}), ref)
    assert shifted.loc["x", "mean_diff_sd"] == pytest.approx(0.5, rel=1e-12)
    assert shifted.loc["x", "sd_ratio"] == pytest.approx(1.0, rel=1e-12)
    scaled = compare(fit_from_dict({"posterior": {"x": 3.0 * r + 1.0}}), ref)
    assert scaled.loc["x", "sd_ratio"] == pytest.approx(3.0, rel=1e-12)
    assert scaled.loc["x", "mean_diff_sd"] == pytest.approx((2.0 * r.mean() + 1.0) / sd, rel=1e-12)
    assert scaled.loc["x", "mean_reference"] == pytest.approx(r.mean(), rel=1e-12)
    assert scaled.loc["x", "sd_reference"] == pytest.approx(sd, rel=1e-12)


def test_ks_matches_scipy_ks_2samp():
    """The KS column (and ks_distance) equals scipy.stats.ks_2samp's statistic, including unequal sample
    sizes and tied values."""
    rng = np.random.default_rng(3)
    cases = [
        (rng.normal(size=700), rng.normal(0.2, 1.3, size=450)),
        (rng.integers(0, 5, size=300).astype(float), rng.integers(0, 6, size=200).astype(float)),
        (rng.standard_t(3, size=50), rng.standard_t(3, size=2000)),
    ]
    for x, y in cases:
        assert ks_distance(x, y) == pytest.approx(stats.ks_2samp(x, y).statistic, abs=1e-15)
    fit = _idata(rng, chains=2, draws=400)
    ref = _idata(rng, chains=3, draws=300, shift=0.1)
    df = compare(fit, ref)
    for j in range(3):
        x = fit.posterior["beta"].values[..., j].ravel()
        y = ref.posterior["beta"].values[..., j].ravel()
        assert df.loc[f"beta[{j}]", "ks"] == pytest.approx(stats.ks_2samp(x, y).statistic, abs=1e-15)


def test_mmd_kernel_parametrisation_exact():
    """With one point each, MMD_b^2 = 2 - 2 exp(-|x-y|^2 / (2 h^2)): checks the kernel's form and scale."""
    x, y = np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]])
    for h in (1.0, 2.5, 7.0):
        assert mmd(x, y, bandwidth=h) == pytest.approx(math.sqrt(2.0 - 2.0 * math.exp(-25.0 / (2 * h * h))),
                                                       rel=1e-12)


def test_median_bandwidth_heuristic():
    """Median heuristic of Räisä, Koskela and Honkela (2021): exact on a two-point case (pooled 500 + 500 copies: the median pairwise
    distance is the gap), scale-equivariant, reproducible by seed, and for N(0, 1) samples close to the
    population median of |X - X'|, sqrt(2) z_0.75, within 5 asymptotic standard errors."""
    assert median_bandwidth([[0.0]], [[3.0]]) == 3.0
    assert median_bandwidth([[1.0, 1.0]], [[1.0, 1.0]]) == 1.0  # all points equal: fallback width
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=2000), rng.normal(size=2000)
    h = median_bandwidth(x, y, seed=7)
    assert h == median_bandwidth(x, y, seed=7)
    assert median_bandwidth(10.0 * x, 10.0 * y, seed=7) == pytest.approx(10.0 * h, rel=1e-12)
    # Standard error of a median of pairwise distances (a U-quantile): 2 sqrt(zeta_1 / n) / f(med), with
    # zeta_1 = Var_X P(|X - X'| <= med | X) and f the density of |X - X'|; n = 1000 pooled subsample points,
    # plus the same term for the 4000 points the subsample is drawn from.
    med = math.sqrt(2.0) * stats.norm.ppf(0.75)
    g = lambda t: stats.norm.cdf(t + med) - stats.norm.cdf(t - med)  # noqa: E731
    m1 = integrate.quad(lambda t: g(t) * stats.norm.pdf(t), -np.inf, np.inf)[0]
    m2 = integrate.quad(lambda t: g(t) ** 2 * stats.norm.pdf(t), -np.inf, np.inf)[0]
    f = 2.0 * stats.norm.pdf(med, scale=math.sqrt(2.0))
    se = 2.0 * math.sqrt((m2 - m1 * m1) * (1 / 1000 + 1 / 4000)) / f
    assert abs(h - med) < 5.0 * se


def test_mmd_small_for_independent_samples_of_same_distribution():
    """Two independent 2000-draw samples of N(0, I_2): MMD_b below the level-1e-6 null bound
    sqrt(2/m) + sqrt(2 log(2/alpha)/m) (= 0.15 for m = 2000), with a fixed kernel and with the median
    heuristic; and compare() reports the same value as mmd()."""
    rng = np.random.default_rng(5)
    m = 2000
    x, y = rng.normal(size=(m, 2)), rng.normal(size=(m, 2))
    bound = math.sqrt(2.0 / m) + _mcdiarmid_eps(m)
    assert mmd(x, y, bandwidth=1.5) < bound
    assert mmd(x, y) < bound
    fit = fit_from_dict({"posterior": {"theta": x.reshape(4, 500, 2)}})
    ref = fit_from_dict({"posterior": {"theta": y.reshape(4, 500, 2)}})
    df = compare(fit, ref)
    assert df.attrs["mmd"] == pytest.approx(mmd(x, y), rel=1e-12)
    assert df.attrs["mmd"] < bound


def test_mmd_clearly_positive_for_shifted_distribution():
    """N(0, I_2) vs N(1.5 e_1, I_2): with h = 1.5 the estimate is within the McDiarmid + bias tolerance of the
    closed-form population MMD (about 0.50), which lies far above the null bound; with the median heuristic
    it also exceeds the null bound, and compare() on InferenceData shows it."""
    rng = np.random.default_rng(6)
    m, h, shift = 2000, 1.5, 1.5
    x = rng.normal(size=(m, 2))
    y = rng.normal(size=(m, 2)) + np.array([shift, 0.0])
    truth = _gaussian_mmd(2, shift, h)
    null_bound = math.sqrt(2.0 / m) + _mcdiarmid_eps(m)
    tol = _mcdiarmid_eps(m) + 1.0 / (m * truth)
    assert truth - tol > null_bound  # the test can tell the two cases apart
    assert mmd(x, y, bandwidth=h) == pytest.approx(truth, abs=tol)
    assert mmd(x, y) > null_bound
    fit = fit_from_dict({"posterior": {"theta": y.reshape(2, 1000, 2)}})
    ref = fit_from_dict({"posterior": {"theta": x.reshape(2, 1000, 2)}})
    assert compare(fit, ref).attrs["mmd"] > null_bound


def test_mmd_thins_deterministically_to_max_draws():
    """Samples longer than max_draws are thinned at evenly spaced positions: results are reproducible,
    attrs record 2000 draws used of 8000, and thinning to every 4th draw explicitly gives the same MMD."""
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=(8000, 3)), rng.normal(0.3, 1.0, size=(8000, 3))
    h = median_bandwidth(x, y)
    a = mmd(x, y, max_draws=2000)
    assert a == mmd(x, y, max_draws=2000)
    idx = np.round(np.linspace(0, 7999, 2000)).astype(int)
    assert a == pytest.approx(mmd(x[idx], y[idx], bandwidth=h, max_draws=None), rel=1e-12)
    df = compare(fit_from_dict({"posterior": {"t": x.reshape(4, 2000, 3)}}),
                 fit_from_dict({"posterior": {"t": y.reshape(4, 2000, 3)}}))
    assert df.attrs["mmd_draws_private"] == 2000 and df.attrs["n_draws_private"] == 8000
    assert df.attrs["mmd"] == pytest.approx(a, rel=1e-12)


def _write_stan_csv(path, header, rows, *, save_warmup=0, warmup_rows=()):
    lines = [
        "# stan_version_major = 2",
        "# model = toy_model",
        "# method = sample (Default)",
        "#   sample",
        "#     num_samples = %d" % len(rows),
        "#     num_warmup = %d" % len(warmup_rows),
        "#     save_warmup = %d" % save_warmup,
        "#     thin = 1 (Default)",
        ",".join(header),
    ]
    lines += [",".join(repr(float(v)) for v in r) for r in warmup_rows]
    lines += ["# Adaptation terminated", "# Step size = 0.8", "# Diagonal elements of inverse mass matrix:",
              "# 1, 1, 1"]
    lines += [",".join(repr(float(v)) for v in r) for r in rows]
    lines += ["# ", "#  Elapsed Time: 0.01 seconds (Warm-up)", ""]
    path.write_text("\n".join(lines))


def test_stan_csv_input(tmp_path):
    """Stan CSV files (comments, lp__ and other __ columns, a column-major matrix L.i.j, a vector beta.k,
    saved warmup rows in one chain) are parsed into the right arrays, and compare() on them equals
    compare() on the equivalent InferenceData."""
    rng = np.random.default_rng(8)
    chains, draws = 2, 40
    mu = rng.normal(size=(chains, draws))
    beta = rng.normal(size=(chains, draws, 3))
    L = rng.normal(size=(chains, draws, 2, 3))
    header = ["lp__", "accept_stat__", "stepsize__", "treedepth__", "n_leapfrog__", "divergent__", "energy__",
              "mu", "beta.1", "beta.2", "beta.3"]
    header += [f"L.{i + 1}.{j + 1}" for j in range(3) for i in range(2)]  # Stan's column-major order
    paths = []
    for c in range(chains):
        rows = []
        for d in range(draws):
            sampler = [-10.0 - d, 0.9, 0.8, 2, 3, 0, 11.0]
            rows.append(sampler + [mu[c, d], *beta[c, d], *L[c, d].T.ravel()])
        warm = [[99.0] * len(header)] * 5 if c == 1 else []
        p = tmp_path / f"chain_{c + 1}.csv"
        _write_stan_csv(p, header, rows, save_warmup=int(c == 1), warmup_rows=warm)
        paths.append(p)

    parsed = read_stan_csv(paths)
    assert list(parsed) == ["mu", "beta", "L"]
    np.testing.assert_allclose(parsed["mu"], mu.reshape(-1))
    np.testing.assert_allclose(parsed["beta"], beta.reshape(-1, 3))
    np.testing.assert_allclose(parsed["L"], L.reshape(-1, 2, 3))

    idata = fit_from_dict({"posterior": {"mu": mu, "beta": beta, "L": L}})
    from_csv = compare(idata, [str(p) for p in paths])
    from_idata = compare(idata, idata)
    assert from_csv.attrs["mmd"] == 0.0
    np.testing.assert_allclose(from_csv.to_numpy(), from_idata.loc[from_csv.index].to_numpy(), rtol=1e-12)
    single = compare(fit_from_dict({"posterior": {"mu": mu[:1], "beta": beta[:1], "L": L[:1]}}), paths[0])
    assert single.attrs["n_draws_reference"] == draws


def test_cmdstanmcmc_like_reference():
    """An object with cmdstanpy's stan_variables() (draws pooled over chains) is accepted as reference
    without importing cmdstanpy."""
    rng = np.random.default_rng(9)
    fit = _idata(rng, chains=2, draws=100)

    class FakeCmdStanMCMC:
        def stan_variables(self):
            p = fit.posterior
            return {"mu": p["mu"].values.reshape(-1), "beta": p["beta"].values.reshape(-1, 3),
                    "L": p["L"].values.reshape(-1, 2, 2)}

    df = compare(fit, FakeCmdStanMCMC())
    assert df.attrs["mmd"] == 0.0 and len(df) == 8


def test_names_and_shapes_must_match():
    """Different parameter sets raise ValueError naming those in fit only and in reference only; a shape
    mismatch for a shared name raises ValueError naming it; var_names restricts to a common subset."""
    rng = np.random.default_rng(10)
    fit = fit_from_dict({"posterior": {"mu": rng.normal(size=(2, 50)), "beta": rng.normal(size=(2, 50, 3))}})
    ref = fit_from_dict({"posterior": {"mu": rng.normal(size=(2, 50)), "gamma": rng.normal(size=(2, 50))}})
    with pytest.raises(ValueError) as err:
        compare(fit, ref)
    msg = str(err.value)
    assert "in fit only: ['beta']" in msg and "in reference only: ['gamma']" in msg
    assert list(compare(fit, ref, var_names=["mu"]).index) == ["mu"]

    ref2 = fit_from_dict({"posterior": {"mu": rng.normal(size=(2, 50)), "beta": rng.normal(size=(2, 50, 2))}})
    with pytest.raises(ValueError, match=r"'beta' has shape \(3,\) in fit but \(2,\) in reference"):
        compare(fit, ref2)
    with pytest.raises(ValueError, match="in fit only"):
        plot_compare(fit, ref)


def test_package_level_compare_is_callable_after_submodule_import():
    """After the old submodule path ``stan_dp.compare`` has been imported (now a deprecated alias of
    ``stan_dp.output.compare``), the package attribute ``stan_dp.compare`` still works as the function
    ``compare(fit, reference)``."""
    import importlib

    import stan_dp

    module = importlib.import_module("stan_dp.compare")

    fit = fit_from_dict({"posterior": {"mu": np.random.default_rng(13).normal(size=(2, 50))}})
    df = stan_dp.compare(fit, fit)
    assert list(df.index) == ["mu"] and df.attrs["mmd"] == 0.0
    assert module.mmd is mmd


def test_only_posterior_group_is_compared():
    """sample_stats (and other groups) differing between fit and reference are ignored."""
    rng = np.random.default_rng(11)
    post = {"mu": rng.normal(size=(2, 100))}
    fit = fit_from_dict({"posterior": post, "sample_stats": {"accepted": np.ones((2, 100))}})
    ref = fit_from_dict({"posterior": post, "sample_stats": {"lp": rng.normal(size=(2, 100)),
                                                             "diverging": np.zeros((2, 100), bool)}})
    df = compare(fit, ref)
    assert list(df.index) == ["mu"] and df.attrs["mmd"] == 0.0


def test_plot_compare_returns_figure():
    """plot_compare draws one panel per scalar (mu and beta[a..c]: four panels, no empty one) titled like the
    compare table, overlays the private fit and the reference, names both in the legend; var_names selects
    parameters."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    rng = np.random.default_rng(12)
    fit = _idata(rng, chains=2, draws=200, coords={"school": ["a", "b", "c"]}, dims={"beta": ["school"]})
    ref = _idata(rng, chains=2, draws=200, shift=0.3)
    fig = plot_compare(fit, ref, var_names=["mu", "beta"])
    try:
        assert isinstance(fig, Figure)
        assert [ax.get_title() for ax in fig.axes] == ["mu", "beta[a]", "beta[b]", "beta[c]"]
        assert all(len(ax.get_lines()) == 2 for ax in fig.axes)
        texts = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
        assert texts == {"private", "reference (not private)"}
    finally:
        plt.close(fig)


@pytest.mark.parametrize("scalars", [1, 3, 5, 7])
def test_plot_compare_has_no_empty_panel_shows_full_densities_and_the_budget(scalars):
    """However many scalars (1, 3, 5, 7), the figure has exactly one panel per scalar; each curve spans the whole
    range of both samples (densities are not cut at an HDI: the curves reach past the smallest and the largest
    draw and come down to near zero there); the title names the algorithm and the budget of the private fit."""
    import matplotlib.pyplot as plt

    from stan_dp.output.arviz_compat import fit_from_dict

    rng = np.random.default_rng(scalars)
    private = rng.normal(0.5, 1.0, size=(2, 300, scalars))
    reference = rng.normal(0.0, 0.3, size=(2, 300, scalars))
    fit = fit_from_dict({"posterior": {"theta": private}},
                        attrs={"private": 1, "epsilon": 3.0, "delta": 1e-6, "algorithm": "dp-sgnht"})
    ref = fit_from_dict({"posterior": {"theta": reference}}, attrs={"private": 0})
    fig = plot_compare(fit, ref)
    try:
        assert len(fig.axes) == scalars and all(ax.has_data() for ax in fig.axes)
        for j, ax in enumerate(fig.axes):
            for line, _draws in zip(ax.get_lines(), (private[..., j], reference[..., j])):
                x, y = line.get_xdata(), line.get_ydata()
                assert x.min() < min(private[..., j].min(), reference[..., j].min())
                assert x.max() > max(private[..., j].max(), reference[..., j].max())
                assert max(y[0], y[-1]) < 0.05 * y.max()
        title = fig._suptitle.get_text()
        assert "dp-sgnht" in title and "epsilon = 3" in title and "delta = 1e-06" in title
    finally:
        plt.close(fig)


def test_a_posterior_group_alone_is_accepted():
    """fit.posterior (an xarray.Dataset on arviz 0.x, a DataTree node on 1.x) compares like the whole fit."""
    rng = np.random.default_rng(14)
    fit, ref = _idata(rng, chains=2, draws=100), _idata(rng, chains=2, draws=100, shift=0.2)
    whole, group = compare(fit, ref), compare(fit.posterior, ref.posterior)
    assert whole.equals(group) and whole.attrs["mmd"] == group.attrs["mmd"]


def test_plot_compare_reads_the_budget_from_a_stan_csv_header(tmp_path):
    """A private fit given as Stan CSV written by to_stan_csv: the title's algorithm and budget come from its
    stan_dp_* header lines."""
    import matplotlib.pyplot as plt

    from stan_dp.output.arviz_compat import fit_from_dict
    from stan_dp.output.stan_csv import to_stan_csv

    rng = np.random.default_rng(3)
    fit = fit_from_dict({"posterior": {"mu": rng.normal(size=(2, 100))},
                         "sample_stats": {"accepted": np.ones((2, 100), dtype=int)}},
                        attrs={"private": 1, "epsilon": 2.0, "delta": 1e-7, "algorithm": "penalty"})
    ref = fit_from_dict({"posterior": {"mu": rng.normal(size=(2, 100))}}, attrs={"private": 0})
    paths = [str(p) for p in to_stan_csv(fit, tmp_path / "fit.csv")]
    fig = plot_compare(paths, ref)
    try:
        assert fig._suptitle.get_text().startswith("Private fit: penalty, epsilon = 2, delta = 1e-07")
    finally:
        plt.close(fig)
