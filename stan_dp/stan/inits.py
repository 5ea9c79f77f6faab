"""Initial values the Stan way: constrained values by parameter name, as CmdStanPy takes them.

``DPStanModel.sample(inits=...)`` and ``stan-dp sample --inits`` accept

* a dict ``{"alpha": 0.0, "beta": [0, 0, 0], "sigma": 1.0}`` of constrained values, used by every chain;
* a list of such dicts, one per chain;
* the path of a JSON file holding either of the above (CmdStan's JSON format);
* a number, as CmdStan's ``init=`` takes it (also as text, ``--inits 0.5``): 0 starts every chain with every
  unconstrained value at 0; R > 0 draws each unconstrained value from uniform(-R, R) (Stan's default is R = 2);
* what ``stan_dp.run.pipeline.sample_private`` takes directly: None, a radius, or unconstrained arrays.

Dicts are transformed to the unconstrained scale with the data-free (prior, N = 0) instance of the program,
so no private row is read. Inits must be public: values chosen before seeing the rows (never estimates from
them), since the chains start there and the released draws depend on the start.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..suggest import did_you_mean
from .stan_messages import clean_stan_message

__all__ = ["InitsError", "load_inits", "resolve_inits"]


class InitsError(ValueError):
    """Initial values that cannot be used (the message names the problem and the fix)."""


def init_radius(value: Any) -> float:
    """A CmdStan-style numeric init checked: 0 (every unconstrained value 0) or R > 0 (uniform(-R, R))."""
    radius = float(value)
    if not (math.isfinite(radius) and radius >= 0):
        raise InitsError(f"A numeric init must be 0 or a positive radius, got {value}.\nAs in CmdStan: 0 starts "
                         "every unconstrained value at 0, R > 0 draws them from uniform(-R, R).")
    return radius


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def load_inits(inits: Any) -> Any:
    """Read ``inits`` from a JSON file when it is a path (str or PathLike naming a file, or ending in .json);
    a string holding JSON text (starting with ``{`` or ``[``) is parsed too, and a string or number holding a
    number is a CmdStan-style radius (:func:`init_radius`). Other values pass through."""
    if isinstance(inits, (int, float, np.integer, np.floating)) and not isinstance(inits, (bool, np.bool_)):
        return init_radius(inits)
    if isinstance(inits, (str, os.PathLike)):
        text = str(inits).strip()
        if isinstance(inits, str) and _number(text) is not None:  # CmdStan: a number, else a file name
            return init_radius(_number(text))
        if text[:1] in "{[":
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise InitsError(f"inits is not valid JSON: {exc}.\nGive a JSON object such as "
                                 '{"alpha": 0, "beta": [0, 0]} or the path of a JSON file.') from exc
        path = Path(text).expanduser()
        if not path.is_file():
            raise InitsError(f"Inits file not found: {inits}.\nGive the path of a JSON file of initial values "
                             '(e.g. {"alpha": 0, "beta": [0, 0]}).')
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise InitsError(f"The inits file {path} is not valid JSON: {exc}.\nFix the file (CmdStan's JSON "
                             "format: one object of parameter values, or a list of them, one per chain).") from exc
    return inits


def _base(name: str) -> str:
    return re.split(r"[.\[]", name, maxsplit=1)[0]


def _unconstrain_one(values: Mapping[str, Any], prior: Any, where: str) -> np.ndarray:
    params = list(dict.fromkeys(_base(n) for n in prior.param_names()))
    others = {_base(n) for n in prior.param_names(include_tp=True, include_gq=True)}
    unknown = [str(k) for k in values if k not in others]
    if unknown:  # first: a misspelt name is also a missing one, and the misspelling is the news
        named = ", ".join(k + did_you_mean(k, params) for k in unknown)
        raise InitsError(f"{where} names {named}, which the program does not declare as parameters.\nThe "
                         f"parameters are: {', '.join(params)}.")
    missing = [p for p in params if p not in values]
    if missing:
        raise InitsError(f"{where} has no value for parameter(s) {', '.join(missing)}.\nGive a value for every "
                         f"parameter: {', '.join(params)}.")
    chosen = {k: values[k] for k in params}
    try:
        theta = np.asarray(prior.param_unconstrain_json(json.dumps(chosen)), dtype=float)
    except (RuntimeError, TypeError, ValueError) as exc:
        reason = clean_stan_message(str(exc)) or type(exc).__name__
        raise InitsError(f"{where} cannot be used: {reason.rstrip('.')}.\nGive values inside each parameter's declared "
                         "support (e.g. sigma > 0 for real<lower=0>) with the declared sizes.") from exc
    if not np.all(np.isfinite(theta)):
        raise InitsError(f"{where} lies on the boundary of a parameter's support (its unconstrained value is "
                         "infinite).\nMove the value strictly inside the support (e.g. sigma = 1 rather than 0).")
    return theta


def resolve_inits(inits: Any, prior: Any, chains: int) -> Any:
    """``inits`` in a form ``sample_private`` takes: dicts (or a JSON file of them) become unconstrained arrays
    of shape (dim,) or (chains, dim) through ``prior.param_unconstrain_json`` (``prior`` is the data-free
    BridgeStan instance); None, radii and arrays pass through unchanged."""
    inits = load_inits(inits)
    if isinstance(inits, Mapping):
        return _unconstrain_one(inits, prior, "inits")
    if isinstance(inits, Sequence) and not isinstance(inits, (str, bytes)) and inits \
            and all(isinstance(x, Mapping) for x in inits):
        if len(inits) != chains:
            raise InitsError(f"inits is a list of {len(inits)} dicts but the run has {chains} chains.\nGive one "
                             "dict per chain, or a single dict used by every chain.")
        return np.stack([_unconstrain_one(x, prior, f"inits for chain {i + 1}") for i, x in enumerate(inits)])
    if isinstance(inits, Sequence) and not isinstance(inits, (str, bytes)) \
            and any(isinstance(x, Mapping) for x in inits):
        raise InitsError("inits mixes dicts and other values.\nGive a dict, a list of dicts (one per chain), or "
                         "unconstrained arrays.")
    return inits
