"""Default run lengths (stan_dp.methods.kernels.run_lengths): chosen from public quantities only, bounded, monotone where the
rule says so, overridden by explicit values, and recorded in the attrs and on stderr."""
import itertools
from pathlib import Path

import numpy as np
import pytest

import stan_dp.methods.kernels.run_lengths as rl
from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.methods.kernels.run_lengths import choose_run_lengths
from stan_dp.run.pipeline import sample_private
from test_auto import RowsForbidden


def _sg_total(epsilon=1.0, n_rows=10_000, dim=4, chains=4, algorithm="dp-sgnht", **options):
    r = choose_run_lengths(algorithm, n_rows=n_rows, dim=dim, epsilon=epsilon, delta=1e-5, chains=chains,
                           options={"grad_clip": 5.0, **options})
    return r.iter_warmup + r.iter_sampling


@pytest.mark.parametrize("algorithm, options", [
    ("dp-sgnht", {"grad_clip": 2.0}),
    ("penalty", {"ratio_clip": 2.0}),
    ("ops", {"loglik_bounds": (-5.0, 0.0)}),
    ("hybrid", {"loglik_bounds": (-5.0, 0.0), "grad_clip": 2.0}),
])
def test_lengths_are_chosen_before_any_row_is_read(algorithm, options, capsys):
    """With a likelihood whose data methods raise, sample_private gets as far as the kernel's first step, so
    the rule (printed on stderr before) used only N, dim, the budget, chains and the options."""
    with pytest.raises(AssertionError, match="read the likelihood"):
        sample_private(RowsForbidden(), algorithm=algorithm, epsilon=1.0, delta=1e-5, chains=1, seed=0,
                       show_progress=True, inits=np.zeros((1, 3)), **options)
    kernel = "dp-sgnht" if algorithm == "hybrid" else algorithm  # the hybrid's kernel after its OPS starts
    assert f"run lengths: {kernel}:" in capsys.readouterr().err


def test_sg_lengths_bounded_and_monotone():
    """The SG rule stays in [MIN_TOTAL, SG_MAX]; T* grows with epsilon and N and shrinks with chains and dim,
    so the clamped total is monotone the same way."""
    epsilons, ns, dims, chains = (0.3, 1.0, 3.0, 10.0, 100.0), (500, 3000, 10_000, 100_000), (1, 4, 20), (1, 4, 8)
    for algorithm in rl.SG_ALGORITHMS:
        for eps, n, d, c in itertools.product(epsilons, ns, dims, chains):
            r = choose_run_lengths(algorithm, n_rows=n, dim=d, epsilon=eps, delta=1e-5, chains=c,
                                   options={"grad_clip": 3.0})
            assert rl.MIN_TOTAL <= r.iter_warmup + r.iter_sampling <= rl.SG_MAX
            assert r.iter_warmup >= rl.MIN_TOTAL // 2 and r.iter_sampling >= rl.MIN_TOTAL // 2
    totals = [_sg_total(epsilon=e) for e in epsilons]
    assert totals == sorted(totals) and totals[0] == rl.MIN_TOTAL and totals[-1] == rl.SG_MAX
    totals = [_sg_total(epsilon=3.0, n_rows=n) for n in ns]
    assert totals == sorted(totals) and totals[0] < totals[-1]
    totals = [_sg_total(epsilon=3.0, chains=c) for c in chains]
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]
    totals = [_sg_total(epsilon=3.0, dim=d) for d in dims]
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]


@pytest.mark.parametrize("algorithm", ["dp-sgld", "dp-sghmc", "dp-sgnht"])
def test_sg_break_even_matches_the_calibrated_noise(algorithm):
    """The rule's T* is where the kernel's free-step cap on the preconditioner, computed with the noise the
    accountant calibrates for T* iterations, equals the public start metric d / (N L^2) (within 10 %: the rule
    uses the CLT form tau_g = q sqrt(chains T) / mu_g of the subsampled Gaussian composition)."""
    from stan_dp.phases.calibration import calibrate

    n, d, chains, L, eps = 10_000, 4, 4, 5.0, 3.0
    r = choose_run_lengths(algorithm, n_rows=n, dim=d, epsilon=eps, delta=1e-5, chains=chains,
                           options={"grad_clip": L})
    t_star = r.break_even
    assert f"T* = {t_star:.3g}" in r.reason  # the number is stated, after the plain words
    assert rl.MIN_TOTAL < t_star < rl.SG_MAX
    plan = calibrate(algorithm, epsilon=eps, delta=1e-5, chains=chains, iterations=int(round(t_star)), n_rows=n)
    q, tau = plan.parameters["sampling_rate"], plan.parameters["tau_g"]
    if algorithm == "dp-sgld":  # eta = 4 rho q / (1 - q); free iff eta m <= (q / (tau L))^2
        m_cap = (q / (tau * L)) ** 2 / (4 * 0.1 * q / (1 - q))
    else:  # h = 2 rho C q / (1 - q) with C = 1; free iff m <= C q^2 / (2 tau^2 L^2 h)
        m_cap = q ** 2 / (2 * (tau * L) ** 2 * (2 * 0.1 * q / (1 - q)))
    assert m_cap == pytest.approx(d / (n * L ** 2), rel=0.1)


def test_sg_rule_reads_the_public_options():
    """A larger sampling rate shortens T* (the minibatch step grows like q / (1 - q)); free_steps=False, whose
    step is not budget-capped, gets the plain 1000 + 1000."""
    assert _sg_total(epsilon=3.0, sampling_rate=0.6) < _sg_total(epsilon=3.0, sampling_rate=0.1)
    r = choose_run_lengths("dp-sgld", n_rows=10_000, dim=4, epsilon=3.0, delta=1e-5, chains=4,
                           options={"grad_clip": 5.0, "free_steps": False})
    assert (r.iter_warmup, r.iter_sampling) == (1000, 1000) and "free_steps=False" in r.reason


def test_ops_draws_few_and_untempered_when_possible():
    """OPS releases one draw per chain unless more keep rho = 1; the count never falls as epsilon grows, and
    the internal warmup (free) is OPS_WARMUP."""
    from stan_dp.phases.calibration import calibrate
    from stan_dp.samplers.ops import ops_temperature

    draws = []
    for eps in (0.5, 1.0, 10.0, 100.0, 1000.0):
        r = choose_run_lengths("ops", n_rows=1000, dim=3, epsilon=eps, delta=1e-5, chains=4,
                               options={"loglik_bounds": (-5.0, 0.0)})
        assert r.iter_warmup == rl.OPS_WARMUP and 1 <= r.iter_sampling <= rl.OPS_MAX_DRAWS
        draws.append(r.iter_sampling)
        if r.iter_sampling > 1:  # more than one draw only while every draw stays untempered
            plan = calibrate("ops", epsilon=eps, delta=1e-5, chains=4, iterations=r.iter_sampling, n_rows=1000)
            assert ops_temperature(plan.parameters["epsilon_draw"], (-5.0, 0.0)) == 1.0
    assert draws == sorted(draws) and draws[0] == 1 and draws[-1] > 1


def test_other_families_and_bad_input():
    """penalty MH and DP-HMC: LONG_RUN_ROWS / N iterations within LONG_RUN_TOTAL (non-increasing in N);
    DP-Fast MH: ACCEPT_TEST."""
    for algorithm in rl.LONG_RUN_ALGORITHMS:
        totals = []
        for n in (100, 10_000, 20_000, 100_000, 10_000_000):
            r = choose_run_lengths(algorithm, n_rows=n, dim=2, epsilon=1.0, delta=1e-5, chains=4)
            totals.append(r.iter_warmup + r.iter_sampling)
        assert totals == sorted(totals, reverse=True)
        assert totals[0] == rl.LONG_RUN_TOTAL[1] and totals[-1] == rl.LONG_RUN_TOTAL[0]
        assert rl.LONG_RUN_TOTAL[0] < totals[2] < rl.LONG_RUN_TOTAL[1]
    r = choose_run_lengths("dp-fast-mh", n_rows=100, dim=2, epsilon=1.0, delta=1e-5, chains=4)
    assert (r.iter_warmup, r.iter_sampling) == rl.ACCEPT_TEST
    with pytest.raises(ValueError, match="chains must be at least 1"):
        choose_run_lengths("penalty", n_rows=100, dim=2, epsilon=1.0, delta=1e-5, chains=0)


def test_explicit_lengths_are_honoured_and_defaults_recorded(capsys):
    """Explicit values win (no reason recorded); a missing one is filled by the rule, recorded in the attrs
    and printed on stderr only with show_progress."""
    model = GaussianMeanModel.simulate(n=400, dim=2, seed=0)
    fit = sample_private(model, algorithm="penalty", epsilon=5.0, delta=1e-5, chains=2, iter_warmup=30,
                         iter_sampling=20, seed=1, show_progress=False, ratio_clip=3.0)
    assert fit.posterior.sizes["draw"] == 20 and "run_lengths_reason" not in fit.attrs
    fit = sample_private(model, algorithm="dp-sgld", epsilon=1.0, delta=1e-5, chains=2, iter_warmup=10, seed=1,
                         show_progress=False, grad_clip=3.0)
    rule = choose_run_lengths("dp-sgld", n_rows=400, dim=2, epsilon=1.0, delta=1e-5, chains=2,
                              options={"grad_clip": 3.0})
    assert fit.posterior.sizes["draw"] == rule.iter_sampling and fit.attrs["iter_warmup"] == 10
    assert fit.attrs["run_lengths_reason"] == rule.reason + "; iter_warmup=10 given"
    assert "run lengths" not in capsys.readouterr().err
    sample_private(model, algorithm="dp-sgld", epsilon=1.0, delta=1e-5, chains=1, iter_warmup=10, seed=1,
                   show_progress=True, grad_clip=3.0)
    one = choose_run_lengths("dp-sgld", n_rows=400, dim=2, epsilon=1.0, delta=1e-5, chains=1,
                             options={"grad_clip": 3.0})
    assert f"run lengths: {one.plain}; iter_warmup=10 given\n" in capsys.readouterr().err  # the details: attrs


def test_cli_defaults_to_the_rule():
    from stan_dp.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["sample", "m.stan", "--data", "d.json", "--output", "o.nc", "--epsilon", "1",
                              "--delta", "1e-5"])
    assert args.iter_warmup is None and args.iter_sampling is None
    args = parser.parse_args(["sample", "m.stan", "--data", "d.json", "--output", "o.nc", "--epsilon", "1",
                              "--delta", "1e-5", "--iter-warmup", "7", "--iter-sampling", "9"])
    assert (args.iter_warmup, args.iter_sampling) == (7, 9)
    sample_help = next(a for a in parser._subparsers._group_actions[0].choices["sample"]._actions
                       if "--iter-warmup" in a.option_strings).help
    assert "chosen per algorithm" in sample_help


def test_the_reason_is_in_plain_words_and_agrees_with_the_docs():
    """The SG rule's reason starts with the lengths and says why in plain words (no T*, q or mu before the details
    in parentheses, which keep the numbers); its shortest runs are the 200 + 200 (1000 + 1000 anchored) and its
    longest the 5000 + 5000 that the privacy-settings page states."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "privacy-settings.md").read_text()
    docs = " ".join(docs.split())
    low, anchored, high = rl.MIN_TOTAL // 2, rl.ANCHORED_MIN_TOTAL // 2, rl.SG_MAX // 2
    assert (f"at least {low} + {low} ({anchored} + {anchored} for an anchored chain, as `auto` runs them) and at most "
            f"{high} + {high}") in docs
    cases = {"short": dict(epsilon=0.3), "anchored": dict(epsilon=0.3, clip_ratio=50.0), "long": dict(epsilon=100.0)}
    for label, extra in cases.items():
        r = choose_run_lengths("dp-sgnht", n_rows=3000, dim=4, delta=1e-5, chains=4, options={"grad_clip": 3.0},
                               **extra)
        assert r.reason.startswith(r.plain) and r.reason[len(r.plain):].startswith(" (details: break-even length T*")
        assert not any(jargon in r.plain for jargon in ("T*", "q=", "mu", "floor", "break-even"))
        total = {"short": low, "anchored": anchored, "long": high}[label]
        assert r.plain.startswith(f"dp-sgnht: {total} + {total} iterations per chain, ")
    assert "shortest run the rule makes for an anchored chain" in choose_run_lengths(
        "dp-sgnht", n_rows=3000, dim=4, epsilon=0.3, delta=1e-5, chains=4, options={"grad_clip": 3.0},
        clip_ratio=50.0).plain
