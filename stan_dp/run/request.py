"""One private run's request: the public keywords sorted once into what they are, and kept as one frozen object.

``sample_private``, ``DPStanModel.sample``, the command line and ``resume`` take the same public keywords (the
public API keeps them as they are). :func:`make_request` is the one function that sorts them: the algorithm and
the budget, the run lengths, the run-level options (``stan_dp.run_options.RUN_LEVEL_OPTIONS``), what the
publication records (seed, warmup groups, debug, the model's name and source hash) and, left over, the method's
own options, which the registered method checks (``stan_dp.methods.registry``). The request is what a checkpoint
stores of the run (:meth:`RunRequest.record`, read back by :meth:`RunRequest.from_record`), and what
``plan_run`` is called with (:meth:`RunRequest.plan_arguments`). Every field is public: given by the caller, never
read from a row.
"""
from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any, Mapping

from ..run_options import RUN_LEVEL_OPTIONS

__all__ = ["PUBLISHING", "RUN_KEYWORDS", "RunRequest", "make_request", "request_keywords"]

#: keywords of ``sample_private`` that shape how a run is executed and published, not planned
RUN_KEYWORDS = ("save_warmup", "debug", "stop_event")
#: what the publication records besides the draws (stored with the request in a checkpoint)
PUBLISHING = ("seed", "save_warmup", "debug", "model_name", "source_hash")


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """A private run as requested: algorithm, budget, lengths, run-level settings, the method's options and
    what its publication records."""

    algorithm: str
    epsilon: float
    delta: float
    chains: int = 4
    iter_warmup: int | None = None
    iter_sampling: int | None = None
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the run-level options given
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the method's own (and its phases')
    seed: Any = None
    save_warmup: bool = False
    debug: bool = False
    model_name: str | None = None
    source_hash: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    def plan_arguments(self) -> dict[str, Any]:
        """The keywords of ``stan_dp.run.plan.plan_run`` (besides N, the dimension, quiet and the facts)."""
        return {"algorithm": self.algorithm, "epsilon": self.epsilon, "delta": self.delta, "chains": self.chains,
                "iter_warmup": self.iter_warmup, "iter_sampling": self.iter_sampling, **self.settings,
                **self.options}

    def record(self) -> dict[str, Any]:
        """The request as a checkpoint stores it: the plan's keywords and the publication's (plain values)."""
        return {**self.plan_arguments(), **{name: getattr(self, name) for name in PUBLISHING}}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "RunRequest":
        """The request a checkpoint stored (:meth:`record`)."""
        return make_request(**dict(record))


def make_request(*, algorithm: str, epsilon: float, delta: float, chains: int = 4, iter_warmup: int | None = None,
                 iter_sampling: int | None = None, seed: Any = None, save_warmup: bool = False, debug: bool = False,
                 model_name: str | None = None, source_hash: str | None = None, **keywords: Any) -> RunRequest:
    """The :class:`RunRequest` of the public keywords of ``sample_private`` (the likelihood, inits, progress,
    stop event and checkpoint settings aside): the run-level options among ``keywords`` become its settings, the
    rest the method's options. It sorts and records; the method checks (``stan_dp.run.plan.check_request``)."""
    settings = {k: keywords.pop(k) for k in RUN_LEVEL_OPTIONS if k in keywords}
    return RunRequest(algorithm=algorithm, epsilon=epsilon, delta=delta, chains=chains, iter_warmup=iter_warmup,
                      iter_sampling=iter_sampling, settings=settings, options=keywords, seed=seed,
                      save_warmup=bool(save_warmup), debug=bool(debug), model_name=model_name,
                      source_hash=source_hash)


def request_keywords(keywords: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords ``DPStanModel.sample`` passes on that a request is made of: all but the execution keywords
    ``RUN_KEYWORDS`` (the run-level options and the method's own)."""
    return {k: v for k, v in keywords.items() if k not in RUN_KEYWORDS}
