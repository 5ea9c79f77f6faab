"""The empirical privacy audit (stan_dp.audit): its statistics, that correct mechanisms stay below their claims,
its report and its CLI. That it catches planted faults is tests/audit/test_audit_faults.py. Fixed seeds (the bench,
benchmarks/bench_audit.py, runs the long version)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

import stan_dp
from stan_dp.audit import (
    LinearCanary,
    RadialCanary,
    SubstitutedRows,
    audit,
    audit_target,
    default_audit_model,
    epsilon_lower_bound,
)
from stan_dp.audit.bounds import clopper_pearson_upper, select_statistic
from stan_dp.audit.targets import (
    NAN_RUN_TARGETS,
    iteration_target,
    UNIT_TARGET_ALGORITHMS,
)
from stan_dp.samplers import ALGORITHMS

from audit_support import FAST_OPTIONS, FULL_AUDIT



# ------------------------------------------------------------------------------------------------ statistics
def test_clopper_pearson_matches_scipy_exact_interval():
    """The one-sided upper bound at level L equals the upper end of scipy's exact two-sided interval at 2L - 1."""
    for k, n in [(0, 50), (3, 50), (49, 50), (50, 50), (120, 10_000)]:
        ours = float(clopper_pearson_upper(k, n, 0.975))
        ref = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact").high
        assert ours == pytest.approx(ref, rel=1e-9)


def test_epsilon_lower_bound_formula():
    """epsilon >= log((1 - delta - beta_hi) / alpha_hi) with Clopper-Pearson upper bounds (Bonferroni split):
    a perfectly separating test on n runs gives log((1 - delta - b) / a) with a = b = 1 - 0.025^(1/n), and
    identical error rates of one half give 0."""
    n, delta = 1000, 1e-5
    a = 1.0 - 0.025 ** (1.0 / n)
    assert float(epsilon_lower_bound(0, n, 0, n, delta, 0.95)) == pytest.approx(math.log((1 - delta - a) / a))
    assert float(epsilon_lower_bound(500, n, 500, n, delta, 0.95)) == 0.0


def test_selection_finds_the_separating_direction():
    """Two features share one noise draw; only their difference separates D0 from D1 exactly, while the means
    differ along another direction: the Fisher projection finds the exact one."""
    rng = np.random.default_rng(3)
    z0, z1 = rng.standard_normal(2000), rng.standard_normal(2000)
    x0 = np.column_stack([z0, z0 + 1.0])
    x1 = np.column_stack([z1 + 2.0, z1 + 2.0])
    eps, stat = select_statistic(x0, x1, ["a", "b"], 1e-5, 0.95)
    assert "Fisher" in stat.description and eps > 5.0


def test_identical_data_sets_give_no_bound():
    """With D0 = D1 (the canary equals the row it replaces) no test separates them: the bound is small."""
    model = default_audit_model()
    canary = LinearCanary(np.ones(2), 0.0)  # l = 0 everywhere, like no row at all
    pair = (canary, canary)
    target = iteration_target("penalty", model, epsilon=1.0, delta=1e-5, options={}, canary_pairs=[pair],
                              index=0, theta0=np.zeros(2), step_sizes=(0.05,))
    result = audit_target(target, 2000, seed=4)
    assert result.epsilon_lower_bound < 0.3


# ---------------------------------------------------------------------------------------------- neighbours
def test_substituted_rows_replace_exactly_one_row():
    """SubstitutedRows changes row `index` (values and gradients, for any row subset) and nothing else."""
    model = default_audit_model(n_rows=5)
    canary = RadialCanary(np.zeros(2), 3.0)
    sub = SubstitutedRows(model, 2, canary)
    theta = np.array([0.3, -0.4])
    values = sub.row_log_lik(theta)
    assert values[2] == pytest.approx(3.0 * 0.5)
    np.testing.assert_array_equal(np.delete(values, 2), np.delete(model.row_log_lik(theta), 2))
    v, g = sub.row_log_lik_grad(theta, np.array([2, 0, 2]))
    np.testing.assert_allclose(g[0], 3.0 * theta / 0.5)
    np.testing.assert_allclose(g[2], g[0])
    np.testing.assert_allclose(g[1], model.row_log_lik_grad(theta, np.array([0]))[1][0])
    with pytest.raises(ValueError, match="row index"):
        SubstitutedRows(model, 5, canary)


# ----------------------------------------------------------------------------------- correct implementation
@pytest.mark.slow
def test_mechanisms_stay_below_their_claims():
    """Each mechanism of privacy/mechanisms.py, calibrated to (2, 1e-5), gives a lower bound below 2."""
    report = audit(targets=["mechanisms"], epsilon=2.0, runs=40_000, seed=11, show_progress=False)
    assert len(report.results) == 5
    for r in report.results:
        assert r.epsilon_lower_bound < r.claimed_epsilon, r
        assert r.claimed_epsilon == pytest.approx(2.0)


@pytest.mark.slow
def test_every_algorithm_one_iteration_stays_below_its_claim():
    """One iteration of every registered kernel (all of ALGORITHMS) at a public state stays below the claim, and
    so does one iteration of each minibatch kernel on the subsampled base (20 rows at the clip bound, rate 0.3),
    of every clipped kernel on anchored rows (difference clip and control-variate ratios at their bound), of
    DP-HMC on the anchored trajectory with public momentum and of DP-Fast MH on anchored rows all at the bound."""
    report = audit(targets=["iteration"], algorithms=list(ALGORITHMS), epsilon=1.0, runs=1200, seed=12,
                   options=FAST_OPTIONS, show_progress=False)
    sg = [a for a in ALGORITHMS if "sampling_rate" in ALGORITHMS[a].option_spec.names]
    assert sg == ["dp-sgld", "dp-sghmc", "dp-sgnht"]
    anchored = [a for a in ALGORITHMS if "diff_clip" in ALGORITHMS[a].option_spec.names]
    assert set(anchored) == {"penalty", "dp-hmc", "dp-fast-mh", "dp-fast-mh-full", *sg}
    assert {r.target for r in report.results} == ({f"iteration:{a}" for a in ALGORITHMS}
                                                  | {f"iteration:{a} subsampled" for a in sg}
                                                  | {f"iteration:{a} anchored" for a in anchored}
                                                  | {"iteration:dp-hmc anchored trajectory"}
                                                  | {f"iteration:{a} unit" for a in UNIT_TARGET_ALGORITHMS}
                                                  | {f"iteration:{a} anchored at bound" for a in anchored
                                                     if a.startswith("dp-fast-mh")})
    for r in report.results:
        assert r.guarantee_holds and r.epsilon_lower_bound < r.claimed_epsilon, r


@pytest.mark.slow
def test_every_algorithm_whole_runs_stay_below_their_claims():
    """Whole short runs through sample_private (every algorithm) stay below the budget their attrs state."""
    report = audit(targets=["run"], algorithms=list(ALGORITHMS), epsilon=1.0, runs=1000, run_runs=80, seed=13,
                   options=FAST_OPTIONS, show_progress=False)
    assert {r.target for r in report.results} == {f"run:{a}" for a in ALGORITHMS}
    for r in report.results:
        assert r.guarantee_holds and r.runs == 80
        assert r.epsilon_lower_bound < r.claimed_epsilon <= 1.0, r


@pytest.mark.slow
def test_ops_based_runs_with_a_nan_canary_stay_below_their_claims():
    """OPS, the hybrid and an OPS warm start, with a substituted row that fails to evaluate on half the space (a
    NaN canary): whole runs stay below the (conditional) budget their attrs state. The default algorithm list
    includes these targets."""
    report = audit(targets=["run"], epsilon=1.0, run_runs=80, seed=15, show_progress=False,
                   only=[f"run:{k}" for k in NAN_RUN_TARGETS])
    assert {r.target for r in report.results} == {f"run:{k}" for k in NAN_RUN_TARGETS}
    for r in report.results:
        assert r.guarantee_holds and r.epsilon_lower_bound < r.claimed_epsilon <= 1.0, r


@pytest.mark.slow
def test_a_row_with_nan_values_and_gradients_is_as_private_as_any_row():
    """A substituted row whose log-likelihood and gradient are NaN (what the engine returns for a row that
    throws) is handled by every kernel's mechanism path: the run completes and the bound stays below the claim."""
    class NanRow:
        n_rows, dim, name = 1, 2, "NaN row"

        def row_log_lik(self, theta, rows=None):
            return np.full(1, np.nan)

        def row_log_lik_grad(self, theta, rows=None):
            return np.full(1, np.nan), np.full((1, 2), np.nan)

    model = default_audit_model()
    pair = (NanRow(), RadialCanary(np.zeros(2), 1e6))
    for algorithm in ALGORITHMS:
        target = iteration_target(algorithm, model, epsilon=1.0, delta=1e-5,
                                  options={**FAST_OPTIONS.get(algorithm, {}),
                                           **({"row_bound": 1.0} if "fast" in algorithm else {})},
                                  canary_pairs=[pair], index=0, theta0=np.zeros(2), step_sizes=(0.05,))
        result = audit_target(target, 1000, seed=14)
        assert result.epsilon_lower_bound < result.claimed_epsilon, result


@pytest.mark.slow
@FULL_AUDIT
def test_whole_anchored_and_dp_laplace_runs_stay_below_their_claims():
    """Whole short runs of an anchored DP-SGLD run (DP-GD anchor, G~ and a diagonal F~, then the chain) and of
    dp-laplace (DP-GD anchor, G~ and F~, then draws), their released statistics among the features, stay below the
    budget their attrs state (opposite linear canaries, clipped at the bound in every phase; 60 runs each)."""
    report = audit(targets=["run"], algorithms=["dp-sgld anchor=dp-gd", "dp-laplace"], epsilon=1.0, run_runs=60,
                   seed=16, show_progress=False)
    assert {r.target for r in report.results} == {"run:dp-sgld anchor=dp-gd", "run:dp-laplace"}
    for r in report.results:
        assert r.guarantee_holds and r.epsilon_lower_bound < r.claimed_epsilon <= 1.0, r


# -------------------------------------------------------------------------------------------- API and CLI

def test_report_json_and_text():
    """to_json has the documented fields per target and says the audit output is not private."""
    report = stan_dp.audit(targets=["mechanisms"], runs=40, seed=1, show_progress=False)
    data = json.loads(report.to_json())
    assert data["private"] is False and "not covered" in data["note"]
    for entry in data["results"]:
        for key in ("claimed_epsilon", "epsilon_lower_bound", "confidence", "runs", "statistic"):
            assert key in entry
    assert "lower bound" in str(report) and "mechanism:ratio" in str(report)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="runs"):
        audit(runs=5, show_progress=False)
    with pytest.raises(ValueError, match="unknown algorithm"):
        audit(algorithms=["nope"], show_progress=False)
    with pytest.raises(ValueError, match="unknown audit target"):
        audit(targets=["everything"], show_progress=False)


def test_cli_audit_writes_json(tmp_path, capsys):
    """`stan-dp audit` prints the table, writes the JSON report and exits 0 when no claim is exceeded."""
    from stan_dp.cli import main

    out = tmp_path / "audit.json"
    status = main(["audit", "--runs", "40", "--seed", "2", "--target", "mechanisms", "--target", "iteration",
                   "--algorithm", "penalty", "--json", str(out), "--quiet"])
    assert status == 0
    text = capsys.readouterr().out
    assert "iteration:penalty" in text and "claim eps" in text
    data = json.loads(out.read_text())
    assert [r["target"] for r in data["results"]][-3:] == ["iteration:penalty", "iteration:penalty anchored",
                                                          "iteration:penalty unit"]
    assert main(["audit", "--data", "x.json"]) == 2


@pytest.mark.stan
def test_audit_on_a_compiled_stan_model_with_a_given_canary(stan_model):
    """A compiled Stan program with data: D1 substitutes a given canary row (Stan data values) for row 0."""
    from stan_dp.tools.demo import simulate_logistic

    model = stan_model("logistic")
    data = simulate_logistic(50, -0.5, (1.0, -1.0), 2.5, seed=3)
    canary = {"x": [10.0, -10.0], "y": 1}
    report = audit(model=model, data=data, canary=canary, algorithms=["penalty"], targets=["iteration"],
                   runs=400, seed=5, show_progress=False)
    (r,) = [r for r in report.results if r.target == "iteration:penalty"]  # and the kernel's anchored target
    assert r.epsilon_lower_bound < r.claimed_epsilon and "given canary" in r.variant
    assert all(r.epsilon_lower_bound < r.claimed_epsilon for r in report.results)


def test_whole_run_features_have_one_shape_when_a_run_releases_fewer_draws():
    """A run cut short (a chain stopped at a draw the prior rules out, its chain_posterior group gone) gives the
    same feature names as a full run: the draw axis is NaN-padded and the released draw count is a feature."""
    import xarray as xr

    from stan_dp.audit.targets import _fit_features

    def fit(draws: int, chain_group: bool):
        theta = np.arange(draws * 2, dtype=float).reshape(1, draws, 2)
        groups = {"posterior": xr.Dataset({"theta": (("chain", "draw", "theta_dim_0"), theta)}),
                  "sample_stats": xr.Dataset({"accepted": (("chain", "draw"), np.ones((1, draws)))})}
        if chain_group:
            groups["chain_posterior"] = groups["posterior"]
        tree = xr.DataTree.from_dict(groups)
        tree.attrs["diff_clip"] = 0.5
        return tree

    full_names, full = _fit_features(fit(5, True), 5)
    cut_names, cut = _fit_features(fit(0, False), 5)
    assert cut_names == full_names
    by_name = dict(zip(cut_names, cut))
    assert by_name["posterior.draws"] == 0 and dict(zip(full_names, full))["posterior.draws"] == 5
    assert np.isnan(by_name["posterior.theta[0]"]) and np.isnan(by_name["chain_posterior.theta[9]"])
    assert by_name["attrs.diff_clip[0]"] == 0.5
