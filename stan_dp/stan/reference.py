"""The non-private reference: Stan NUTS on all rows, as ArviZ data (InferenceData or DataTree, per the installed
ArviZ line; see ``stan_dp.output.arviz_compat``).

Backends:
* ``builtin``: Stan's own ``hmc_nuts_diag_e_adapt`` service (the code CmdStan runs) compiled into the model
  library, on the full-data instance, chains in parallel Python threads (the native call releases the GIL),
  with a progress bar;
* ``cmdstan``: CmdStan through cmdstanpy, converted with ArviZ's ``from_cmdstanpy``;
* ``auto``: cmdstan when cmdstanpy finds a working CmdStan installation, else builtin.

The result's attrs say plainly that it is not private: it reads every row without protection.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..output import arviz_compat
from .data import load_data, to_json
from .engine import shapes_from_names
from .nuts_service import NutsError, NutsRun, run_stan_nuts

NOT_PRIVATE = (
    "NOT PRIVATE: this is a non-private reference run that reads every row of the data without any privacy "
    "protection. Do not publish it; use it only to judge private fits."
)
BACKENDS = ("auto", "builtin", "cmdstan")


class ReferenceError(RuntimeError):
    """The reference run could not be made (the message says why and what to do)."""


@dataclass(frozen=True)
class NutsSettings:
    """What the reference NUTS run draws and keeps (the keywords of ``DPStanModel.reference``, Stan's defaults).

    ``seed`` None: a fresh seed is drawn and recorded in the result's attrs. ``max_depth``, ``adapt_delta``:
    Stan's tree depth limit and target acceptance; ``init_radius``: initial points uniform on (-r, r) on the
    unconstrained scale (builtin backend); ``include_tp`` / ``include_gq``: keep transformed parameters /
    generated quantities in the posterior group.
    """

    chains: int = 4
    iter_warmup: int = 1000
    iter_sampling: int = 1000
    seed: int | None = None
    max_depth: int = 10
    adapt_delta: float = 0.8
    init_radius: float = 2.0
    include_tp: bool = False
    include_gq: bool = False


def cmdstan_available() -> bool:
    """True when cmdstanpy is installed and finds a CmdStan installation."""
    try:
        import cmdstanpy
    except ImportError:
        return False
    try:
        cmdstanpy.cmdstan_path()
    except (ValueError, RuntimeError):
        return False
    return True


def run_reference(model: Any, data: Any, settings: NutsSettings, *, show_progress: bool = True,
                  backend: str = "auto"):
    """Run non-private NUTS for ``model`` (a ``DPStanModel``) on all rows of ``data``; see module docstring."""
    if backend not in BACKENDS:
        raise ValueError(f"Unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}.")
    if settings.chains < 1 or settings.iter_sampling < 1 or settings.iter_warmup < 0:
        raise ValueError("chains and iter_sampling must be at least 1 and iter_warmup at least 0.")
    if backend == "cmdstan" and not cmdstan_available():
        raise ReferenceError(
            "backend='cmdstan' needs cmdstanpy and a CmdStan installation: pip install 'stan-dp[cmdstan]', then "
            "install CmdStan (python -m cmdstanpy.install_cmdstan, or set CMDSTAN to an existing installation). "
            "backend='builtin' needs neither."
        )
    if settings.seed is None:
        settings = replace(settings, seed=int(np.random.SeedSequence().generate_state(1)[0] % (2**31 - 1)))
    raw = load_data(data)
    declared = {d.name for d in model.data_declarations}
    kept = {k: v for k, v in raw.items() if k in declared}
    if backend == "cmdstan" or (backend == "auto" and cmdstan_available()):
        idata = _run_cmdstan(model, kept, settings, show_progress)
        engine = "CmdStan (cmdstanpy)"
    else:
        idata = _run_builtin(model, kept, settings, show_progress)
        engine = "Stan hmc_nuts_diag_e_adapt (built into the model library)"
    idata.attrs.update(
        {
            "private": 0,
            "privacy_warning": NOT_PRIVATE,
            "inference_library": "stan-dp reference",
            "reference_engine": engine,
            "model_name": model.name,
            "stan_source_hash": model.source_hash,
            "seed": int(settings.seed),
            "chains": int(settings.chains),
            "iter_warmup": int(settings.iter_warmup),
            "iter_sampling": int(settings.iter_sampling),
        }
    )
    return idata


def _run_builtin(model, data, settings: NutsSettings, show_progress: bool):
    full = model.bridgestan(data)
    run = NutsRun(chains=settings.chains, iter_warmup=settings.iter_warmup, iter_sampling=settings.iter_sampling,
                  seed=int(settings.seed), init_radius=settings.init_radius, max_depth=settings.max_depth,
                  adapt_delta=settings.adapt_delta)
    try:
        result = run_stan_nuts(full, model.library_path, run, label="reference NUTS", show_progress=show_progress)
    except NutsError as exc:
        raise ReferenceError(f"The reference run failed. {exc}") from None
    names, values = result.names, result.values
    n_params = len(full.param_names())
    n_tp = len(full.param_names(include_tp=True)) - n_params
    keep = slice(0, n_params + (n_tp if settings.include_tp else 0))
    posterior = _unflatten(names[keep], values[:, :, keep])
    if settings.include_gq:
        gq = slice(n_params + n_tp, len(names))
        posterior.update(_unflatten(names[gq], values[:, :, gq]))
    return arviz_compat.fit_from_dict({"posterior": posterior, "sample_stats": result.stats})


def _unflatten(names: list[str], values: np.ndarray) -> dict[str, np.ndarray]:
    """(chains, draws, flat) values with Stan's column-major flat names to named arrays."""
    out, pos = {}, 0
    chains, draws = values.shape[:2]
    for name, shape in shapes_from_names(names).items():
        size = int(np.prod(shape)) if shape else 1
        block = values[:, :, pos:pos + size]
        if shape:
            block = block.reshape(chains, draws, *shape[::-1])
            block = block.transpose(0, 1, *range(len(shape) + 1, 1, -1))
        else:
            block = block[:, :, 0]
        out[name] = np.ascontiguousarray(block)
        pos += size
    return out


def _run_cmdstan(model, data, settings: NutsSettings, show_progress: bool):
    import cmdstanpy

    csm = cmdstanpy.CmdStanModel(stan_file=str(model.stan_file))
    fit = csm.sample(
        data=json.loads(to_json(data)), chains=settings.chains, iter_warmup=settings.iter_warmup,
        iter_sampling=settings.iter_sampling, seed=settings.seed, show_progress=show_progress,
        max_treedepth=settings.max_depth, adapt_delta=settings.adapt_delta,
    )
    idata = arviz_compat.from_cmdstanpy(fit)
    shapes = shapes_from_names(model.bridgestan(data).param_names(include_tp=settings.include_tp, include_gq=settings.include_gq))
    posterior = arviz_compat.get_group(idata, "posterior")
    drop = [v for v in posterior.data_vars if v not in shapes]
    if drop:
        arviz_compat.replace_group(idata, "posterior", posterior.drop_vars(drop))
    return idata
