"""Initial values the Stan way: constrained values by parameter name, as CmdStanPy takes them.

``DPStanModel.sample(inits=...)`` and ``stan-dp sample --inits`` accept

* a dict ``{"alpha": 0.0, "beta": [0, 0, 0], "sigma": 1.0}`` of constrained values, used by every chain;
* a list of such dicts, one per chain;
* the path of a JSON file holding either of the above (CmdStan's JSON format);
* what ``stan_dp.run.pipeline.sample_private`` takes directly: None, a radius, or unconstrained arrays.

Dicts are transformed to the unconstrained scale with the data-free (prior, N = 0) instance of the program,
so no private row is read. Inits must be public: values chosen before seeing the rows (never estimates from
them), since the chains start there and the released draws depend on the start.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .stan_messages import clean_stan_message

__all__ = ["InitsError", "load_inits", "resolve_inits"]


class InitsError(ValueError):
    """Initial values that cannot be used (the message names the problem and the fix)."""


def load_inits(inits: Any) -> Any:
    """Read ``inits`` from a JSON file when it is a path (str or PathLike naming a file, or ending in .json);
    a string holding JSON text (starting with ``{`` or ``[``) is parsed too. Other values pass through."""
    if isinstance(inits, (str, os.PathLike)):
        text = str(inits).strip()
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
    missing = [p for p in params if p not in values]
    if missing:
        raise InitsError(f"{where} has no value for parameter(s) {', '.join(missing)}.\nGive a value for every "
                         f"parameter: {', '.join(params)}.")
    unknown = [k for k in values if k not in others]
    if unknown:
        raise InitsError(f"{where} names {', '.join(map(str, unknown))}, which the program does not declare as "
                         f"parameters.\nThe parameters are: {', '.join(params)}.")
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
