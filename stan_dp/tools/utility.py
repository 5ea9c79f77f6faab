"""Utility of a private fit against a reference posterior: the numbers the benchmarks and ``advise`` report.

``score_draws`` compares private draws with reference draws, both as arrays (chains, draws, k) of the same
released scalars: the largest |mean difference| in reference sds, the median sd ratio (private / reference),
the largest rank-normalised split R-hat of the private chains, and the MMD (``stan_dp.output.compare.mmd``) of the
standardised joint draws. ``released_matrix`` turns an ArviZ result or unconstrained draws into that array.

These functions read only the draws they are given. Scoring against a reference computed from private rows is
not private: the benchmarks and ``advise`` use simulated or public data only.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..likelihood import RowLikelihood
from ..output.compare import mmd
from ..phases.anchor import DEFAULT_ANCHORED

__all__ = ["options_for", "released_matrix", "TrialRun", "run_and_score", "score_draws", "split_rhat", "split_variant"]


def released_matrix(likelihood: RowLikelihood, source: Any) -> np.ndarray:
    """(chains, draws, k) array of the released scalars, flattened in ``param_shapes()`` order.

    source: unconstrained draws of shape (chains, draws, dim), or ArviZ output with a ``posterior`` group
        holding the likelihood's parameters.
    """
    shapes = likelihood.param_shapes()
    if isinstance(source, np.ndarray):
        chains, draws, _ = source.shape
        out = []
        for c in range(chains):
            rows = []
            for i in range(draws):
                values = likelihood.constrain(source[c, i])
                rows.append(np.concatenate([np.ravel(values[name]) for name in shapes]))
            out.append(rows)
        return np.asarray(out, dtype=float)
    post = source["posterior"] if not hasattr(source, "posterior") else source.posterior
    parts = []
    for name in shapes:
        arr = np.asarray(post[name].values if hasattr(post[name], "values") else post[name], dtype=float)
        parts.append(arr.reshape(arr.shape[0], arr.shape[1], -1))
    return np.concatenate(parts, axis=2)


def split_rhat(draws: np.ndarray) -> float:
    """Largest rank-normalised split R-hat (Vehtari et al. 2021) over the columns of (chains, draws, k)."""
    import arviz as az

    values = []
    for j in range(draws.shape[2]):
        col = draws[:, :, j]
        if np.ptp(col) == 0:
            values.append(float("inf"))
            continue
        values.append(float(az.rhat(col, method="rank")))
    return float(np.max(values))


def score_draws(fit: np.ndarray, reference: np.ndarray, *, seed: int = 0) -> dict[str, float]:
    """Error of ``fit`` against ``reference`` (both (chains, draws, k)).

    Returns ``max_mean_err_sd`` (max_j |mean_fit_j - mean_ref_j| / sd_ref_j), ``median_sd_ratio``
    (median_j sd_fit_j / sd_ref_j), ``rhat`` (max split R-hat of the fit, inf for a stuck coordinate) and
    ``mmd`` (of the joint draws standardised by the reference means and sds).
    """
    fit = np.asarray(fit, dtype=float)
    reference = np.asarray(reference, dtype=float)
    if fit.ndim != 3 or reference.ndim != 3 or fit.shape[2] != reference.shape[2]:
        raise ValueError(f"fit and reference must be (chains, draws, k) with equal k; got {fit.shape} and "
                         f"{reference.shape}.")
    f = fit.reshape(-1, fit.shape[2])
    r = reference.reshape(-1, reference.shape[2])
    ref_mean, ref_sd = r.mean(axis=0), r.std(axis=0, ddof=1)
    ref_sd = np.where(ref_sd > 0, ref_sd, 1.0)
    err = np.abs(f.mean(axis=0) - ref_mean) / ref_sd
    ratio = f.std(axis=0, ddof=1) / ref_sd
    finite = np.all(np.isfinite(f))
    return {
        "max_mean_err_sd": float(np.max(err)) if finite else float("inf"),
        "median_sd_ratio": float(np.median(ratio)) if finite else float("nan"),
        "rhat": split_rhat(fit) if finite and fit.shape[1] >= 4 else float("nan"),
        "mmd": mmd((f - ref_mean) / ref_sd, (r - ref_mean) / ref_sd, seed=seed) if finite else float("nan"),
    }


def options_for(algorithm: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options among ``options`` that a run of ``algorithm`` takes: the kernel's own (for "auto": the clip
    bounds, from which it picks), the run-level ones, the warm start's and, for a kernel that can be anchored
    (it takes ``diff_clip``), the anchor's (``stan_dp.phases.anchor``). Others (another kernel's) are left out.
    """
    from ..methods import registry
    from ..run.auto import CLIP_OPTIONS
    from ..methods.dp_ssp.ssp import SSP_OPTIONS
    from ..phases.warm_start import WARM_START_SPEC
    from ..run_options import RUN_LEVEL_OPTIONS

    if registry.is_auto(algorithm):  # the clip bounds auto chooses from, dp-ssp's, the run's and a warm start's
        names = {*CLIP_OPTIONS, *SSP_OPTIONS, *RUN_LEVEL_OPTIONS, *WARM_START_SPEC.names}
    else:
        names = set(registry.get(algorithm).option_names)
    return {k: v for k, v in options.items() if k in names}


#: suffix of a battery algorithm name that asks for the anchored variant (``anchor="dp-gd"``)
ANCHORED_SUFFIX = "+anchor"


#: suffix that asks for a privately chosen clip bound (``clip="adaptive"``, ``stan_dp.phases.adaptive_clip``)
ADAPTIVE_SUFFIX = "+adaptive"

#: suffix (after "+adaptive") that also asks for the private quantile of the anchor differences
#: (``diff_clip_steps=DIFF_QUANTILE_STEPS``, ``stan_dp.phases.adaptive_clip``)
DIFF_QUANTILE_SUFFIX = "+diffq"
DIFF_QUANTILE_STEPS = 30


def split_variant(name: str) -> tuple[str, dict[str, Any]]:
    """``"dp-sgld+anchor"`` -> ("dp-sgld", {"anchor": "dp-gd"}); ``"dp-sgnht+anchor+adaptive"`` and
    ``"dp-laplace+adaptive"`` add {"clip": "adaptive"}; ``"dp-sgnht+anchor+adaptive+diffq"`` also adds
    {"diff_clip_steps": DIFF_QUANTILE_STEPS}; a plain name -> (name, {}), except for the kernels that a gradient
    bound anchors by default (``stan_dp.phases.anchor.DEFAULT_ANCHORED``): their plain name means the plain kernel,
    (name, {"anchor": "none"}), so that a battery's plain and "+anchor" columns stay what they say."""
    options: dict[str, Any] = {}
    if name.endswith(DIFF_QUANTILE_SUFFIX):
        name, options["diff_clip_steps"] = name[: -len(DIFF_QUANTILE_SUFFIX)], DIFF_QUANTILE_STEPS
    if name.endswith(ADAPTIVE_SUFFIX):
        name, options["clip"] = name[: -len(ADAPTIVE_SUFFIX)], "adaptive"
    if name.endswith(ANCHORED_SUFFIX):
        name, options["anchor"] = name[: -len(ANCHORED_SUFFIX)], "dp-gd"
    elif name in DEFAULT_ANCHORED and "clip" not in options:
        options["anchor"] = "none"
    return name, options


@dataclass(frozen=True)
class TrialRun:
    """What ``sample_private`` is given for one scored run besides the algorithm and its options: the budget,
    the chains and run lengths (None: the algorithm's defaults, ``stan_dp.methods.kernels.run_lengths``), the seed, the
    starts (``inits``, as ``sample_private`` takes them) and whether to show the plan lines and progress bar."""

    epsilon: float
    delta: float
    chains: int
    iter_warmup: int | None
    iter_sampling: int | None
    seed: int
    inits: Any = None
    show_progress: bool = False


def run_and_score(likelihood: RowLikelihood, algorithm: str, bounds: dict[str, Any], reference: np.ndarray,
                  run: TrialRun, *, score_seed: int = 0) -> dict[str, Any]:
    """Run ``algorithm`` with its defaults and the options it takes among ``bounds`` (clip bounds and any other
    option, ``options_for``) on ``likelihood`` (simulated or PUBLIC data) as ``run`` says (``TrialRun``), and
    score the fit against ``reference`` (released scalars, (chains, draws, k)); ``score_seed`` seeds the score.

    ``algorithm`` may carry the suffixes "+anchor" (the anchored variant), "+adaptive" (clip="adaptive") and
    "+diffq" (the anchor-difference quantile), ``split_variant``.

    Returns the ``score_draws`` numbers plus ``wall_s``, ``options`` (the options used), ``chosen`` (what
    "auto" picked, else ``algorithm``), ``chain_rhat`` (the fit's own convergence verdict: on the chains' draws
    before a noise-aware shift) and the run lengths used (``iter_warmup``, ``iter_sampling``; passing
    None asks for the algorithm's defaults, ``stan_dp.methods.kernels.run_lengths``); a run refused or failing numerically
    gives ``{"error": its first line, "wall_s": ...}``. Warnings (convergence ones included) are silenced: the
    scores say the same. ``show_progress`` shows the run's plan lines and progress bar on stderr.
    """
    import time
    import warnings

    from ..run.pipeline import sample_private

    from ..methods import registry

    algorithm, variant = split_variant(algorithm)
    options = {**options_for(algorithm, bounds), **variant}
    warms_up = registry.is_auto(algorithm) or registry.get(algorithm).warms_up
    iter_warmup = run.iter_warmup if warms_up else None  # closed-form draws: no warmup
    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = sample_private(likelihood, algorithm=algorithm, epsilon=run.epsilon, delta=run.delta,
                                 chains=run.chains, iter_warmup=iter_warmup, iter_sampling=run.iter_sampling,
                                 seed=run.seed, inits=run.inits, show_progress=run.show_progress, **options)
    except (ValueError, FloatingPointError, OverflowError) as exc:
        return {"error": str(exc).splitlines()[0][:120], "wall_s": time.perf_counter() - started}
    wall = time.perf_counter() - started
    scores = score_draws(released_matrix(likelihood, fit), reference, seed=score_seed)
    verdict = json.loads(str(fit.attrs.get("convergence", "{}")))
    scores["chain_rhat"] = float(verdict.get("max_rhat", float("nan")))
    return {**scores, "wall_s": wall, "options": options, "chosen": fit.attrs.get("auto_choice", algorithm),
            "iter_warmup": int(fit.attrs["iter_warmup"]), "iter_sampling": int(fit.attrs["iter_sampling"])}
