"""Private warm starts and the hybrid sampler (Wang, Fienberg and Smola 2015, section 4).

Small data sets at small epsilon need a good start: a private sampler started from data-free inits
(uniform(-2, 2)) may spend its whole budget on the way to the posterior. A warm start spends a public share
``warm_start_share`` of epsilon on a mechanism whose output is each chain's initial point; the main sampler
then runs from there with the rest. Both parts are composed in ONE report (``accounting.calibrate`` with the
warm start as a prefix phase): the warm start's noise is fixed first from its share, then the main kernel's
noise is calibrated so that the composition of everything (PLD at the run's delta) spends the budget.
Because the composition is tight, the main part gets at least (1 - share) epsilon.

Warm starts (run option ``warm_start``):

* ``"ops"``: one OPS draw per chain (``stan_dp.samplers.ops``) at epsilon_draw = share * epsilon / chains.
  Needs ``loglik_bounds``. The guarantee of the whole run is then CONDITIONAL ON EXACT SAMPLING (the attrs
  say so). ``algorithm="hybrid"`` is this warm start followed by an SG-MCMC kernel (``then``, default
  "dp-sgnht") with ``ops_share`` (default 1/2, as in Wang, Fienberg and Smola 2015) of the budget.
* ``"dp-gd"``: noisy clipped-gradient ascent on the log posterior with Poisson subsampling and iterate
  averaging, per chain from its data-free init: ``warm_start_steps`` steps (default 300), each one
  Poisson-subsampled Gaussian mechanism on the sum of per-row gradients clipped to
  ``warm_start_grad_clip`` (default: the kernel's ``grad_clip`` when it has one, otherwise required); the
  start is the average of the iterates of the second half. Not conditional: an ordinary (epsilon,
  delta) guarantee, accounted like DP-SGD (dp-accounting PLD of the Poisson-subsampled Gaussian).
  Step: theta += s m0 (grad log p0 + (S + noise) / q), m0 = d / (N L^2) the SG kernels' public initial
  metric (the posterior precision per coordinate when the clip rarely binds) and s = ``warm_start_step``
  (default 0.5). The rows' total clipped gradient moves theta by at most s d / L per step, so the ascent
  crosses the data-free init region in tens of steps, and the averaging of the second half divides the noise
  variance by about steps / 2.

Default share: 0.5 (the paper's split for the hybrid). The warm start only has to land in the posterior's
bulk, but at small epsilon both mechanisms degrade quickly with a smaller share (OPS's temperature is
proportional to its epsilon; DP-GD's noise to 1 / epsilon), while the main sampler, once started in the bulk,
loses less from a smaller budget. The benchmark (``benchmarks/bench_ops_hybrid.py``) reports the outcome.

The initial points are mechanism outputs, so they are releasable; nothing else from the warm start is
released.
"""
from __future__ import annotations

import dataclasses
import math
import types
from typing import Any, Callable, Mapping

import numpy as np

from ..likelihood import RowLikelihood
from ..output.progress import progress_bar
from ..privacy.accounting import calibrate_phases
from ..privacy.events import NoiseDeclaration, Phase, subsampled_gaussian_release
from ..privacy.noise_source import streams
from ..samplers.ops import OPS, BoundsOption, BOUNDS_DOC, pure_draw_release
from ..samplers.options import Option, OptionSpec
from ..samplers.sgmcmc import default_sampling_rate
from .chains import initial_points
from .dp_gd import noisy_gradient_ascent

__all__ = ["KINDS", "WARM_STARTS", "WarmStart", "WarmStartKind", "uses_loglik_bounds", "HYBRID_THEN", "split_warm_start", "hybrid_arguments"]

WARM_STARTS = ("ops", "dp-gd")
HYBRID_THEN = ("dp-sgld", "dp-sghmc", "dp-sgnht")
DEFAULT_HYBRID_THEN = "dp-sgnht"
DP_GD_RELEASE = "DP-GD warm start: clipped minibatch gradient sum"

WARM_START_SPEC = OptionSpec("warm start", [
    Option("warm_start", "choice", None, choices=WARM_STARTS, none_means="no warm start",
           doc="'ops' (one OPS draw per chain; needs loglik_bounds; conditional on exact sampling) or 'dp-gd' "
               "(noisy clipped gradient ascent with iterate averaging)"),
    Option("warm_start_share", "real", 0.5, low=0.0, high=1.0, low_open=True, high_open=True,
           doc="share of epsilon given to the warm start (strictly between 0 and 1)"),
    BoundsOption("loglik_bounds", "real", None, doc=BOUNDS_DOC),
    Option("temper_prior", "bool", True, doc="OPS warm start: temper the prior too"),
    Option("warm_start_warmup", "int", 1000, low=0, doc="OPS warm start: internal NUTS warmup iterations"),
    Option("warm_start_thin", "int", 10, low=1, doc="OPS warm start: NUTS iterations after the warmup"),
    Option("warm_start_steps", "int", 300, low=2, doc="DP-GD warm start: noisy gradient steps per chain"),
    Option("warm_start_grad_clip", "real", None, low=0.0, low_open=True,
           none_means="the kernel's grad_clip",
           doc="DP-GD warm start: public per-row gradient clip bound L"),
    Option("warm_start_sampling_rate", "real", None, low=0.0, high=1.0, low_open=True,
           none_means="min(1, 30 / sqrt(N))", doc="DP-GD warm start: Poisson sampling probability q"),
    Option("warm_start_step", "real", 0.5, low=0.0, low_open=True,
           doc="DP-GD warm start: step in units of the public metric d / (N L^2)"),
])

_OPS_ONLY = ("loglik_bounds", "temper_prior", "warm_start_warmup", "warm_start_thin")
_GD_ONLY = ("warm_start_steps", "warm_start_grad_clip", "warm_start_sampling_rate", "warm_start_step")


@dataclasses.dataclass(frozen=True)
class WarmStartKind:
    """What tells one kind of warm start from the other: its own options, its releases per chain, the unit its
    progress counts and whether its guarantee is conditional on exact sampling."""

    name: str
    own_options: tuple[str, ...]
    unit: str  # what one step of its progress is ("draw" or "it")
    one_draw: bool  # one release per chain (OPS) rather than warm_start_steps of them (DP-GD)
    conditional_guarantee: str | None

    def steps(self, options: Mapping[str, Any]) -> int:
        """Releases (and progress steps) per chain."""
        return 1 if self.one_draw else int(options["warm_start_steps"])


#: the kinds by name (the values of ``warm_start``)
KINDS = {
    "ops": WarmStartKind("ops", _OPS_ONLY, "draw", True, OPS.conditional_guarantee),
    "dp-gd": WarmStartKind("dp-gd", _GD_ONLY, "it", False, None),
}


@dataclasses.dataclass
class WarmStart:
    """A validated warm start: kind, share and its options."""

    kind: str
    share: float
    options: dict

    @property
    def way(self) -> WarmStartKind:
        """The kind's description (:data:`KINDS`)."""
        return KINDS[self.kind]

    @property
    def conditional_guarantee(self) -> str | None:
        """The guarantee text of a run started by OPS draws (conditional on exact sampling), else None."""
        return self.way.conditional_guarantee

    # ---------------------------------------------------------------------------------- accounting
    def prefix_phase(self, *, epsilon: float, delta: float, chains: int, n_rows: int) -> Phase:
        """The warm start's releases as a fixed phase (noise set from ``share * epsilon`` alone)."""
        if self.way.one_draw:
            eps_draw = self.share * float(epsilon) / int(chains)
            self.options["epsilon_draw"] = eps_draw
            decl = NoiseDeclaration(parameters=lambda s: {"epsilon_draw": eps_draw},
                                    releases=lambda p: [pure_draw_release(p["epsilon_draw"],
                                                                          "OPS warm start draw")],
                                    noise_names=("epsilon_draw",))
            return Phase(decl, int(chains), 1)
        q = self.options["warm_start_sampling_rate"]
        q = default_sampling_rate(n_rows) if q is None else float(q)
        self.options["warm_start_sampling_rate"] = q
        n = int(n_rows)

        def releases(p: dict) -> list:
            return [subsampled_gaussian_release(DP_GD_RELEASE, p["tau_g"], sampling="poisson", n_rows=n,
                                                sampling_rate=q,
                                                note="sigma = 2 tau_g L; one release per warm-start step")]

        steps = int(self.options["warm_start_steps"])
        searched = NoiseDeclaration(parameters=lambda s: {"tau_g": s}, releases=releases, noise_names=("tau_g",),
                                    start=max(q * math.sqrt(chains * steps), 0.5))
        own = calibrate_phases([Phase(searched, int(chains), steps)], epsilon=self.share * float(epsilon),
                               delta=delta, algorithm="dp-gd warm start")
        tau = float(own.parameters["tau_g"])
        self.options["tau_g"] = tau
        fixed = NoiseDeclaration(parameters=lambda s: {"tau_g": tau}, releases=releases, noise_names=("tau_g",))
        return Phase(fixed, int(chains), steps)

    def iterations(self, chains: int) -> int:
        """Accounted warm-start iterations summed over chains."""
        return int(chains) * self.way.steps(self.options)

    # ---------------------------------------------------------------------------------- running
    def run(self, likelihood: RowLikelihood, *, chains: int, seed: Any, inits: Any, show_progress: bool = False,
            desc: str | None = None) -> np.ndarray:
        """Each chain's initial point (chains, dim): mechanism outputs, releasable.

        show_progress: a progress bar / line on stderr like the run's (``stan_dp.output.progress``), counting warm-start
            steps (DP-GD) or draws (OPS) over all chains; it shows counts only. desc: its label.
        """
        rngs = streams(seed, "mechanism noise", "warm start", int(chains))
        starts, _ = initial_points(inits, int(chains), int(likelihood.dim),
                                   streams(seed, "chain starts", "warm start", int(chains)))
        out = np.empty((int(chains), int(likelihood.dim)))
        per_chain = self.way.steps(self.options)
        bar = progress_bar(total=int(chains) * per_chain, desc=desc or f"{self.kind} warm start ({int(chains)} chains)",
                           unit=self.way.unit, show=show_progress)
        with bar:
            for c in range(int(chains)):
                if self.way.one_draw:
                    out[c] = self._ops(likelihood, rngs[c], starts[c])
                    bar.update(1)
                else:
                    out[c] = self._dp_gd(likelihood, rngs[c], starts[c], on_step=bar.update)
        return out

    def _ops(self, likelihood: RowLikelihood, rng: np.random.Generator, theta0: np.ndarray) -> np.ndarray:
        plan = types.SimpleNamespace(epsilon_draw=self.options["epsilon_draw"])
        kernel = OPS(likelihood, plan, loglik_bounds=self.options["loglik_bounds"],
                     temper_prior=self.options["temper_prior"], thin=self.options["warm_start_thin"])
        kernel.set_internal_warmup(self.options["warm_start_warmup"])
        return kernel.draw_once(rng, theta0)

    def _dp_gd(self, likelihood: RowLikelihood, rng: np.random.Generator, theta0: np.ndarray,
               on_step: Callable[[int], Any] | None = None) -> np.ndarray:
        n, d = int(likelihood.n_rows), int(likelihood.dim)
        clip = float(self.options["warm_start_grad_clip"])
        return noisy_gradient_ascent(
            likelihood, rng, theta0, clip=clip, sampling_rate=float(self.options["warm_start_sampling_rate"]),
            tau=float(self.options["tau_g"]), steps=int(self.options["warm_start_steps"]),
            learning_rate=float(self.options["warm_start_step"]) * d / (n * clip * clip), on_step=on_step,
            failure="the dp-gd warm start left the finite numbers; use a smaller warm_start_step or a larger "
                    "warm_start_grad_clip")

    def describe(self) -> dict:
        """Public description for the attrs (options, shares and noise; no data-dependent values)."""
        keep = self.way.own_options
        out = {"warm_start": self.kind, "warm_start_share": self.share}
        for k in keep:
            v = self.options.get(k)
            out[k] = list(v) if isinstance(v, tuple) else v
        for k in ("epsilon_draw", "tau_g"):
            if k in self.options:
                out[f"warm_start_{k}"] = self.options[k]
        return out


def uses_loglik_bounds(kind: Any) -> bool:
    """Whether the warm start ``kind`` (a value of ``warm_start``) draws with OPS and so takes ``loglik_bounds``."""
    return isinstance(kind, str) and kind in KINDS and KINDS[kind].one_draw


def split_warm_start(options: Mapping[str, Any], kernel_spec: OptionSpec, algorithm: str
                     ) -> tuple[dict[str, Any], WarmStart | None]:
    """Separate the warm-start options from the kernel's; validate them. Returns (kernel options, warm start)."""
    kernel_opts, warm = {}, {}
    for key, value in options.items():
        if key in WARM_START_SPEC.names and key not in kernel_spec.names:
            warm[key] = value
        else:
            kernel_opts[key] = value
    if not warm:
        return kernel_opts, None
    if "warm_start" not in warm or warm["warm_start"] is None:
        raise ValueError(f"options {', '.join(map(repr, sorted(warm)))} configure a warm start, but warm_start is "
                         f"not set; give warm_start='ops' or warm_start='dp-gd'")
    try:
        cfg = WARM_START_SPEC.validate(warm)
    except ValueError as exc:
        raise ValueError(f"{exc} (algorithm {algorithm!r})") from None
    kind = cfg["warm_start"]
    others = {k for other in KINDS.values() if other.name != kind for k in other.own_options}
    wrong = [k for k in warm if k in others]
    if wrong:
        raise ValueError(f"option(s) {', '.join(map(repr, sorted(wrong)))} do not apply to warm_start={kind!r}")
    if KINDS[kind].one_draw and cfg["loglik_bounds"] is None:
        raise ValueError(f"warm_start='ops' needs loglik_bounds; {BOUNDS_DOC}")
    if not KINDS[kind].one_draw and cfg["warm_start_grad_clip"] is None:
        clip = kernel_opts.get("grad_clip")
        if clip is None:
            raise ValueError(f"warm_start='dp-gd' needs a public gradient clip bound: give warm_start_grad_clip "
                             f"(algorithm {algorithm!r} has no grad_clip to reuse)")
        cfg["warm_start_grad_clip"] = float(clip)
    return kernel_opts, WarmStart(kind, float(cfg["warm_start_share"]), cfg)


def hybrid_arguments(options: Mapping[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``algorithm="hybrid"`` as (SG kernel, its options + an OPS warm start, the hybrid's own options).

    Options of the hybrid: ``then`` (one of HYBRID_THEN, default "dp-sgnht"), ``ops_share`` (default 0.5),
    ``loglik_bounds`` (required), ``temper_prior``, the OPS warm start's ``warm_start_warmup`` /
    ``warm_start_thin``, and the options of the ``then`` kernel (e.g. ``grad_clip``, required).
    """
    opts = dict(options)
    then = opts.pop("then", DEFAULT_HYBRID_THEN)
    if not isinstance(then, str) or then.strip().lower() not in HYBRID_THEN:
        raise ValueError(f"option 'then' of algorithm 'hybrid' must be one of {', '.join(map(repr, HYBRID_THEN))}, "
                         f"got {then!r}")
    then = then.strip().lower()
    share = opts.pop("ops_share", 0.5)
    if isinstance(share, (bool, np.bool_)) or not isinstance(share, (int, float)) or not 0.0 < float(share) < 1.0:
        raise ValueError(f"option 'ops_share' of algorithm 'hybrid' must be a number strictly between 0 and 1, "
                         f"got {share!r}; it is the share of epsilon spent on the OPS starts")
    for key in ("warm_start", "warm_start_share"):
        if key in opts:
            raise ValueError(f"algorithm 'hybrid' sets {key} itself (an OPS warm start with ops_share); leave "
                             f"{key} out")
    if opts.get("loglik_bounds") is None:
        raise ValueError(f"option 'loglik_bounds' of algorithm 'hybrid' is required and has no default; {BOUNDS_DOC}")
    opts["warm_start"] = KINDS["ops"].name
    opts["warm_start_share"] = float(share)
    return then, opts, {"then": then, "ops_share": float(share)}
