"""The registry of methods: a new method is one module and one registration, and method names are compared in
one place each (the chooser's name, the anchor's kind), not across the package."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.methods import registry
from stan_dp.run.pipeline import sample_private
from stan_dp.run.plan import algorithm_names, check_request, plan_run

from toy_method import NAME, TOY

PACKAGE = Path(__file__).resolve().parents[2] / "stan_dp"


def test_every_method_is_registered_and_auto_is_the_chooser():
    """The names sample_private takes are the registry's; 'auto' is not a method; a taken name is refused."""
    assert algorithm_names() == registry.names()
    assert {"penalty", "dp-hmc", "dp-sgnht", "ops", "hybrid", "dp-laplace", "dp-ssp", "dp-glm"} <= set(registry.names())
    assert registry.AUTO not in registry.names() and registry.is_auto("auto")
    with pytest.raises(ValueError, match="chooser"):
        registry.register(dataclass_copy(TOY, name="auto"))
    with pytest.raises(ValueError, match="already registered"):
        registry.register(dataclass_copy(TOY, name="penalty"))
    assert registry.reads("auto") == {"linear", "glm"} and registry.reads("dp-ssp") == {"linear"}
    assert registry.needs_unit_cap("dp-glm") and not registry.needs_unit_cap("penalty")


def dataclass_copy(method, **changes):
    import dataclasses

    return dataclasses.replace(method, **changes)


def test_a_registered_toy_method_runs_end_to_end_and_is_gone_afterwards():
    """The toy method (tests/support/toy_method.py, shown in the docs' design page): registered, it is checked, planned,
    executed and published like any method, with its budget in the attrs; unregistered, its name is refused."""
    rng = np.random.default_rng(0)
    model = GaussianMeanModel(rng.normal(1.0, 1.0, size=(200, 2)), obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)
    with registry.registered(TOY):
        assert NAME in algorithm_names()
        with pytest.raises(ValueError, match="needs a public per-row gradient bound"):
            check_request(NAME, {})
        plan = plan_run(200, 2, algorithm=NAME, epsilon=1.0, delta=1e-5, chains=2, iter_sampling=5, quiet=True,
                        grad_clip=2.0)
        assert plan.privacy.epsilon == 1.0
        fit = sample_private(model, algorithm=NAME, epsilon=1.0, delta=1e-5, chains=2, iter_sampling=5,
                             grad_clip=2.0, step=0.5, seed=1, show_progress=False)
        assert fit.attrs["algorithm"] == NAME and fit.attrs["private"] == 1
        assert 0.99 <= fit.attrs["epsilon_spent"] <= 1.0
        assert fit.posterior.sizes["chain"] == 2 and fit.posterior.sizes["draw"] == 5
        with pytest.raises(ValueError, match="step_size"):
            plan_run(200, 2, algorithm=NAME, epsilon=1.0, delta=1e-5, quiet=True, grad_clip=2.0, step_size=0.1)
    assert NAME not in algorithm_names()
    with pytest.raises(ValueError, match=f"Unknown algorithm '{NAME}'"):
        check_request(NAME, {"grad_clip": 1.0})


#: every name a method or the chooser goes by (the warm-start and anchor kinds 'ops' and 'dp-gd' included)
METHOD_NAMES = {"auto", "hybrid", "penalty", "ops", "dp-hmc", "dp-fast-mh", "dp-fast-mh-full", "dp-sgld",
                "dp-sghmc", "dp-sgnht", "dp-laplace", "dp-ssp", "dp-glm", "dp-gd"}
#: names of module constants holding a method's name
NAME_CONSTANTS = {"SSP", "GLM", "LAPLACE", "AUTO", "DP_GD_ANCHOR"}
#: variables compared with "auto" that are not methods (the row engine, the reference backend)
NOT_METHODS = {"engine", "backend"}


def _method_comparisons() -> list[str]:
    """Every ``==`` / ``!=`` / ``in`` comparison in stan_dp whose one side is a method's name (a string literal,
    a tuple of them, or a name constant) and whose other side is not the engine or backend setting."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Name) and s.id in NOT_METHODS for s in sides):
                continue
            if any(_names_a_method(s) for s in sides):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def _names_a_method(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value in METHOD_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_method(e) for e in node.elts)
    return isinstance(node, ast.Name) and node.id in NAME_CONSTANTS


def test_method_names_are_compared_in_at_most_five_places():
    """At most five comparisons against a method's name remain in the package (the chooser's name, the anchor
    kind, ...); everything else asks the registry or a method's attributes."""
    found = _method_comparisons()
    assert len(found) <= 5, found
