"""The wrappers that change what a "row" is (a privacy unit, anchored rows, the audit's substituted rows) offer the
row-likelihood interface and exactly the optional capabilities they implement (stan_dp.likelihood.CAPABILITIES),
written out one by one: none hands an unknown attribute to its base, so a per-row method added to a row likelihood
can never reach a unit run (and clip rows, not units) or an anchored run."""
from __future__ import annotations

import inspect

import numpy as np

from stan_dp.audit.neighbours import LinearCanary, RowsAtBound, SubstitutedRows
from stan_dp.likelihood import (CAPABILITIES, DigestsRows, KeepsAnchor, PartialGradientSums, capabilities,
                                evaluation_digests, offers)
from stan_dp.models.reference_models import LogisticRegressionModel
from stan_dp.privacy.units import UnitLikelihood
from stan_dp.phases.anchor import AnchoredLikelihood

#: the row-likelihood interface (stan_dp.likelihood.RowLikelihood)
INTERFACE = {"n_rows", "dim", "log_prior", "log_prior_grad", "row_log_lik", "row_log_lik_grad", "constrain",
             "param_shapes"}


class _Everything(LogisticRegressionModel):
    """A base that offers every optional capability, and a per-row method the wrappers do not know."""

    def constrain_many(self, thetas):
        return {"beta": np.asarray(thetas)}

    @property
    def partial_clipped_gradient_sums(self):
        return lambda theta, rows, bound, clip: iter(())  # would clip ROWS where they live

    @property
    def partial_anchor_sums(self):
        return lambda *args, **kwargs: iter(())

    def keep_anchor(self, theta_hat, rule):
        self.kept = theta_hat
        return self.partial_clipped_gradient_sums

    def release_memory(self):
        return None

    def row_digests(self):
        return {"x": "digest of x", "y": "digest of y"}

    def row_log_lik_hessian(self, theta, rows=None):  # a per-row method added to the engine later
        raise AssertionError("a wrapper handed a per-row method to its base")


def _base() -> _Everything:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(12, 2))
    return _Everything(x, (rng.uniform(size=12) < 0.5).astype(float))


def _public_surface(obj) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


def test_each_wrapper_offers_exactly_the_capabilities_it_implements():
    """Over a base that offers all six capabilities: a privacy unit offers only the row digests (its own: the
    base's, whose data hold the labels), anchored rows only the per-part clipped sums (their own, None unless the
    base keeps the anchor where the rows live), the audit's substituted rows none; every public attribute of each
    is listed here, no class in their MRO defines __getattr__, and the base's unknown per-row method is not
    reachable through any of them."""
    base = _base()
    assert capabilities(base) == {cap.__name__ for cap in CAPABILITIES}
    unit = UnitLikelihood(base, np.arange(12) // 3, name="person", max_rows_per_unit=2)
    anchored = AnchoredLikelihood(base, np.zeros((12, 3)), np.ones(3), theta_hat=np.zeros(3))
    canary = LinearCanary(np.ones(3), 5.0)
    substituted, at_bound = SubstitutedRows(base, 4, canary), RowsAtBound(base, canary)
    expected = {
        unit: ({"DigestsRows"}, INTERFACE | {"row_digests", "base", "privacy_unit", "max_rows_per_unit", "n_units",
                                             "linear_spec", "linear_refusal", "glm_spec", "glm_refusal",
                                             "prior_program", "linear_rows", "glm_rows"}),
        anchored: ({"PartialGradientSums"}, INTERFACE | {"partial_clipped_gradient_sums", "offset"}),
        substituted: (set(), INTERFACE | {"index", "canary"}),
        at_bound: (set(), INTERFACE | {"canary"}),
    }
    for wrapper, (offered, surface) in expected.items():
        name = type(wrapper).__name__
        assert capabilities(wrapper) == offered, name
        assert _public_surface(wrapper) == surface, (name, _public_surface(wrapper) ^ surface)
        assert not any("__getattr__" in vars(cls) for cls in type(wrapper).__mro__), name
        assert not hasattr(wrapper, "row_log_lik_hessian"), name
    assert unit.row_digests() == base.row_digests()
    # the base keeps the anchor where its rows live only when asked by the anchored rows themselves
    assert anchored.partial_clipped_gradient_sums is not None and np.array_equal(base.kept, np.zeros(3))
    over_unit = AnchoredLikelihood(unit, np.zeros((unit.n_rows, 3)), np.ones(3), theta_hat=np.zeros(3))
    assert over_unit.partial_clipped_gradient_sums is None  # a unit's rows are never clipped where they live


def test_offers_never_follows_a_getattr_fallback():
    """``offers`` finds a capability only on the object or its class: a wrapper that forwards unknown attributes
    to a base with the capability (hasattr says yes) does not offer it."""
    base = _base()

    class Forwarding:
        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

    wrapper = Forwarding(base)
    assert hasattr(wrapper, "keep_anchor") and hasattr(wrapper, "partial_clipped_gradient_sums")
    assert not offers(wrapper, KeepsAnchor) and not offers(wrapper, PartialGradientSums)
    assert capabilities(wrapper) == set()
    assert offers(base, KeepsAnchor) and isinstance(base, KeepsAnchor)


def test_a_unit_over_a_base_without_digests_digests_its_units_values():
    """A unit over a likelihood that names no variables digests its units' log-likelihoods and gradients at fixed
    public points (``evaluation_digests``): equal for the same rows, different when one row's value changes."""
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(20, 2)), (rng.uniform(size=20) < 0.5).astype(float)
    labels = np.arange(20) // 2
    plain = UnitLikelihood(LogisticRegressionModel(x, y), labels)
    assert offers(plain, DigestsRows) and not offers(LogisticRegressionModel(x, y), DigestsRows)
    again = UnitLikelihood(LogisticRegressionModel(x.copy(), y.copy()), labels)
    changed_x = x.copy()
    changed_x[7, 1] += 1e-9
    other = UnitLikelihood(LogisticRegressionModel(changed_x, y), labels)
    assert plain.row_digests() == again.row_digests() == evaluation_digests(again)
    assert plain.row_digests() != other.row_digests()
    assert list(plain.row_digests()) == ["the row values"]
    assert "row_digests" in dict(inspect.getmembers(type(plain)))
