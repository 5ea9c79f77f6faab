"""One option-spec mechanism for every kernel: names, types, bounds, defaults and docs.

Each kernel class carries an :class:`OptionSpec` (``option_spec``) listing its public options as
:class:`Option` records; ``OptionSpec.validate`` checks a user's options and returns them merged with the
defaults, and every error reads the same whatever the kernel:

* unknown name:  ``unknown option 'x' for algorithm 'a'; valid options: o1, o2``
  (with a hint when the name is a run-level option handled by the run machinery);
* bad value:     ``option 'x' of algorithm 'a' must be <requirement>, got <value>; <doc>``.

``sample_private``, the accountant (``calibrate`` shape options) and the CLI all go through it.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Iterable, Mapping

import numpy as np

from ..run_options import RUN_LEVEL_OPTIONS  # the one list (re-exported here)
from ..suggest import did_you_mean
from .base import KernelBase

__all__ = ["Option", "OptionSpec", "RUN_LEVEL_OPTIONS", "DIFF_CLIP", "spec_of", "validate_options"]


_KINDS = ("real", "int", "bool", "choice")


@dataclasses.dataclass(frozen=True)
class Option:
    """One public option of a kernel.

    kind: "real", "int", "bool" or "choice" (one of ``choices``).
    low, high: bounds for "real"/"int" (None = unbounded); ``low_open`` / ``high_open`` make them strict.
    default: the default value; None with ``none_means`` documents what None stands for (e.g. a value
        computed from public quantities), and ``required=True`` makes the option mandatory.
    doc: one line for the user (shown in errors, the CLI help and docs).
    """

    name: str
    kind: str
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple = ()
    required: bool = False
    none_means: str | None = None
    #: words accepted in place of a value, e.g. {"equal": 0.5}
    aliases: tuple = ()

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"Option kind must be one of {_KINDS}, got {self.kind!r}")

    def requirement(self) -> str:
        """The requirement in words, e.g. 'a finite number > 0' or 'one of 'poisson', 'uniform''."""
        if self.kind == "bool":
            return "True or False"
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        noun = "an integer" if self.kind == "int" else "a finite number"
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {self.high:g}")
        text = noun + (" " + " and ".join(parts) if parts else "")
        if self.none_means:
            text += f" (or None: {self.none_means})"
        for word, value in self.aliases:
            text += f" (or {word!r} = {value!r})"
        return text

    def convert(self, value: Any) -> Any:
        """The checked value (converted to float/int/bool), or ValueError with the requirement (no prefix)."""
        if isinstance(value, str) and value.strip().lower() in dict(self.aliases):
            return dict(self.aliases)[value.strip().lower()]
        if value is None and (self.none_means is not None or self.default is None):
            return None  # "not given": a required option is then reported as missing by validate
        if self.kind == "bool":
            if isinstance(value, (bool, np.bool_)):
                return bool(value)
            raise ValueError(self.requirement())
        if self.kind == "choice":
            key = value.strip().lower() if isinstance(value, str) else value
            if key in self.choices:
                return key
            raise ValueError(self.requirement())
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise ValueError(self.requirement())
        x = float(value)
        if not math.isfinite(x):
            raise ValueError(self.requirement())
        if self.kind == "int":
            if not x.is_integer():
                raise ValueError(self.requirement())
            x = int(x)
        if self.low is not None and (x < self.low or (self.low_open and x == self.low)):
            raise ValueError(self.requirement())
        if self.high is not None and (x > self.high or (self.high_open and x == self.high)):
            raise ValueError(self.requirement())
        return x


class OptionSpec:
    """The public options of one algorithm, in display order."""

    def __init__(self, algorithm: str, options: Iterable[Option]):
        self.algorithm = algorithm
        self.options: dict[str, Option] = {}
        for opt in options:
            if opt.name in self.options:
                raise ValueError(f"duplicate option {opt.name!r} in the spec of {algorithm!r}")
            self.options[opt.name] = opt

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.options)

    @property
    def defaults(self) -> dict[str, Any]:
        return {name: opt.default for name, opt in self.options.items()}

    def listing(self) -> str:
        return ", ".join(self.options) or "(none)"

    def unknown_error(self, names: Iterable[str]) -> ValueError:
        names = sorted(names)
        hints = [n for n in names if n in RUN_LEVEL_OPTIONS]
        hint = ""
        if hints:
            hint = (f" ({', '.join(map(repr, hints))} {'is a run-level option' if len(hints) == 1 else 'are run-level options'}"
                    f" handled by the run machinery, not by the kernel)")
        label = "option" if len(names) == 1 else "options"
        named = ", ".join(repr(n) + ("" if n in RUN_LEVEL_OPTIONS else did_you_mean(n, self.names)) for n in names)
        return ValueError(f"unknown {label} {named} for algorithm {self.algorithm!r}{hint}; "
                          f"valid options: {self.listing()}")

    def value_error(self, name: str, value: Any, requirement: str | None = None) -> ValueError:
        opt = self.options[name]
        return ValueError(f"option {name!r} of algorithm {self.algorithm!r} must be "
                          f"{requirement or opt.requirement()}, got {value!r}; {opt.doc}")

    def validate(self, given: Mapping[str, Any], *, require: bool = True) -> dict[str, Any]:
        """The defaults updated with ``given`` after checking every name and value (ValueError otherwise).

        ``require=False`` skips the check that required options are present (for the accountant, which only
        needs the options that shape a kernel's releases).
        """
        unknown = [k for k in given if k not in self.options]
        if unknown:
            raise self.unknown_error(unknown)
        merged = {}
        for name, opt in self.options.items():
            if name in given:
                try:
                    merged[name] = opt.convert(given[name])
                except ValueError:
                    raise self.value_error(name, given[name]) from None
            else:
                merged[name] = opt.default
        for name, opt in self.options.items():  # a bad value above is reported before a missing bound
            if require and opt.required and merged[name] is None:
                raise ValueError(f"option {name!r} of algorithm {self.algorithm!r} is required and has no default "
                                 f"(a public bound only you can choose). Give it as {name}=VALUE in Python or "
                                 f"--option {name}=VALUE on the command line; how to choose it: {opt.doc}")
        return merged

    def describe(self) -> str:
        """One line per option: name, requirement, default and doc (for docstrings and the CLI)."""
        lines = []
        for name, opt in self.options.items():
            default = "required" if opt.required else f"default {opt.default!r}"
            lines.append(f"{name} ({opt.requirement()}; {default}): {opt.doc}")
        return "\n".join(lines)


def spec_of(kernel_cls: type[KernelBase], algorithm: str | None = None) -> OptionSpec:
    """The kernel's ``option_spec``, or one of untyped options built from a plain ``option_defaults`` dict
    (kernels written outside the package)."""
    spec = kernel_cls.option_spec
    if isinstance(spec, OptionSpec):
        return spec
    defaults = dict(kernel_cls.option_defaults or {})
    name = algorithm or kernel_cls.accounting_name or kernel_cls.__name__
    return _UntypedSpec(str(name), defaults)


class _UntypedSpec(OptionSpec):
    def __init__(self, algorithm: str, defaults: dict[str, Any]):
        super().__init__(algorithm, [Option(k, "real", defaults[k], "(no documentation)") for k in sorted(defaults)])

    def validate(self, given: Mapping[str, Any], *, require: bool = True) -> dict[str, Any]:
        unknown = [k for k in given if k not in self.options]
        if unknown:
            raise self.unknown_error(unknown)
        return {**self.defaults, **given}


def validate_options(kernel_cls: type[KernelBase], options: Mapping[str, Any], algorithm: str | None = None) -> dict[str, Any]:
    """``spec_of(kernel_cls).validate(options)``."""
    return spec_of(kernel_cls, algorithm).validate(options)


#: the clip bound of anchored runs, shared by every kernel with a clipped mechanism
DIFF_CLIP = Option(
    "diff_clip", "real", None, low=0.0, low_open=True, none_means="no anchor: the kernel's own clip bounds apply",
    doc="C: clip bound of the anchor-relative per-row terms of an anchored run (gradient differences "
        "g_i(theta) - g_i(theta_hat) in L2 norm, and log-likelihood ratios minus g_i(theta_hat) . (theta' - theta) "
        "per unit move); it replaces the kernel's clip bound in its mechanisms, so the privacy noise scales with "
        "it. Set by anchor='dp-gd' (from public quantities unless given); public, never tuned on the rows")
