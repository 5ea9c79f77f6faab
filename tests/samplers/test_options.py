"""The one option-spec mechanism (stan_dp.samplers.options) shared by every kernel."""
from __future__ import annotations

import re

import pytest

from stan_dp.samplers import ALGORITHMS
from stan_dp.samplers.options import Option, OptionSpec


def test_every_kernel_has_a_spec_and_defaults_agree():
    """Every registered kernel carries an OptionSpec whose defaults are its option_defaults, each documented."""
    for name, cls in ALGORITHMS.items():
        spec = cls.option_spec
        assert isinstance(spec, OptionSpec) and spec.algorithm == name
        assert cls.option_defaults == spec.defaults
        assert all(opt.doc for opt in spec.options.values())
        assert spec.describe().count("\n") == len(spec.options) - 1


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_errors_read_the_same_for_every_kernel(name):
    """Unknown names, run-level names and bad values give the same wording whatever the kernel."""
    spec = ALGORITHMS[name].option_spec
    with pytest.raises(ValueError, match=rf"^unknown option 'bogus' for algorithm '{name}'; valid options: "
                                         rf"{re.escape(spec.listing())}$"):
        spec.validate({"bogus": 1})
    with pytest.raises(ValueError, match=r"'step_size' is a run-level option handled by the run machinery"):
        spec.validate({"step_size": 1})
    first_real = next(o for o in spec.options.values() if o.kind == "real")
    with pytest.raises(ValueError, match=rf"^option '{first_real.name}' of algorithm '{name}' must be a finite "
                                         rf"number.*, got 'x'; "):
        spec.validate({first_real.name: "x"})


def test_option_kinds_and_bounds():
    """Types, bounds (open and closed), choices, booleans, aliases and None-with-meaning are checked."""
    spec = OptionSpec("demo", [
        Option("a", "real", 1.0, "a real", low=0.0, low_open=True, high=1.0),
        Option("k", "int", 2, "an int", low=1),
        Option("b", "bool", False, "a flag"),
        Option("c", "choice", "x", "a choice", choices=("x", "y")),
        Option("s", "real", 0.5, "a share", low=0.0, high=1.0, low_open=True, high_open=True,
               aliases=(("equal", 0.5),)),
        Option("n", "real", None, "computed", low=0.0, none_means="from N"),
        Option("r", "real", None, "needed", required=True),
    ])
    ok = spec.validate({"a": 1, "k": 3.0, "b": True, "c": "Y", "s": "equal", "n": None, "r": -2})
    assert ok == {"a": 1.0, "k": 3, "b": True, "c": "y", "s": 0.5, "n": None, "r": -2.0}
    for bad in ({"a": 0.0}, {"a": 1.5}, {"k": 0}, {"k": 2.5}, {"k": True}, {"b": 1}, {"c": "z"}, {"s": 1.0},
                {"a": float("nan")}, {"n": -1.0}):
        (key,) = bad
        with pytest.raises(ValueError, match=rf"option '{key}' of algorithm 'demo' must be"):
            spec.validate({**bad, "r": 1.0})
    with pytest.raises(ValueError, match="option 'r' of algorithm 'demo' is required"):
        spec.validate({})
    assert spec.validate({}, require=False)["r"] is None
