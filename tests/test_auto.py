"""algorithm="auto" (stan_dp.run.auto): the choice uses public quantities only and is recorded in the attrs."""
import numpy as np
import pytest

from stan_dp.run.auto import resolve_auto
from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.run.pipeline import sample_private


class RowsForbidden:
    """A likelihood whose public shape is known but whose every data method raises."""

    def __init__(self, n_rows=1000, dim=3):
        self.n_rows, self.dim = n_rows, dim

    def __getattr__(self, name):
        raise AssertionError(f"read the likelihood: {name}")


def _choose(**options):
    lik = RowsForbidden()
    return resolve_auto(n_rows=lik.n_rows, dim=lik.dim, epsilon=1.0, delta=1e-5, chains=4, options=options, quiet=True)


def test_auto_reads_no_rows_and_keeps_only_used_bounds():
    """All clip bounds are accepted together; the chosen algorithm keeps the ones it uses, the rest are named."""
    choice = _choose(ratio_clip=2.0, grad_clip=3.0, row_bound=4.0, loglik_bounds=(-5.0, 0.0))
    assert choice.algorithm == "dp-sgnht"
    assert choice.options == {"grad_clip": 3.0}
    assert choice.dropped == ["loglik_bounds", "ratio_clip", "row_bound"]
    assert "unused" in choice.reason


def test_auto_rules_per_bound():
    assert _choose(row_bound=4.0).options == {"ratio_clip": 4.0}
    assert _choose(ratio_clip=2.0, row_bound=4.0).options == {"ratio_clip": 2.0}
    only_grad = _choose(grad_clip=3.0)
    assert only_grad.algorithm == "dp-sgnht" and only_grad.options == {"grad_clip": 3.0}
    with pytest.raises(ValueError, match="got only loglik_bounds"):
        _choose(loglik_bounds=(-4.0, 0.0))
    with pytest.raises(ValueError, match="at least one public clip bound"):
        _choose()
    with pytest.raises(ValueError, match="accepts only the clip bounds"):
        _choose(ratio_clip=1.0, leapfrog_steps=3)


def test_auto_choice_happens_before_any_row_is_read(monkeypatch):
    """sample_private resolves 'auto' before touching the likelihood's rows: with a likelihood whose row methods
    raise, the failure comes from the kernel's first step, after the choice was printed."""
    import stan_dp.run.auto as auto_mod

    calls = []
    real = auto_mod.resolve_auto

    def spy(**kw):
        calls.append(kw)
        return real(**kw)

    monkeypatch.setattr(auto_mod, "resolve_auto", spy)
    with pytest.raises(AssertionError, match="row_log_lik"):
        sample_private(RowsForbidden(), algorithm="auto", epsilon=1.0, delta=1e-5, chains=1, iter_warmup=0,
                       iter_sampling=1, seed=0, show_progress=False, inits=np.zeros((1, 3)), ratio_clip=1.0)
    assert len(calls) == 1 and calls[0]["n_rows"] == 1000


def test_auto_records_choice_in_attrs(capsys):
    model = GaussianMeanModel.simulate(n=500, dim=2, seed=0)
    fit = sample_private(model, algorithm="auto", epsilon=5.0, delta=1e-5, chains=2, iter_warmup=30,
                         iter_sampling=20, seed=1, show_progress=True, ratio_clip=3.0)
    assert fit.attrs["auto_choice"] == "penalty"
    assert "ratio_clip given" in fit.attrs["auto_reason"]
    assert fit.attrs["algorithm"] == "penalty"
    assert "auto: penalty" in capsys.readouterr().err


@pytest.mark.parametrize("bounds, expected", [
    ({"grad_clip": 4.0}, "dp-sgnht"),
    ({"grad_clip": 4.0, "loglik_bounds": (-30.0, 0.0), "ratio_clip": 2.0}, "dp-sgnht"),
])
def test_auto_runs_its_choice_end_to_end(bounds, expected):
    """auto with gradient bounds (alone or with the others) runs through sample_private on one budget."""
    model = GaussianMeanModel.simulate(n=400, dim=2, seed=0)
    fit = sample_private(model, algorithm="auto", epsilon=5.0, delta=1e-5, chains=2, iter_warmup=30,
                         iter_sampling=20, seed=1, show_progress=False, **bounds)
    assert fit.attrs["auto_choice"] == expected
    assert fit.attrs["epsilon"] == pytest.approx(5.0)
