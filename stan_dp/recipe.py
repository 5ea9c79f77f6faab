"""How a run's row likelihood is built from a Stan program and its data: one recipe for a run and its resume.

``DPStanModel.sample`` builds its likelihood with :meth:`LikelihoodRecipe.build`, and a checkpointed run stores the
recipe (:meth:`LikelihoodRecipe.record`: public settings only, the data files' paths and a privacy unit's NAME and
cap, never a label or a value); ``stan_dp.resume`` reads it back (:meth:`LikelihoodRecipe.from_record`) and builds
the same likelihood the same way from the data given again.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

from .privacy.units import UnitLikelihood
from .stan.data import load_data
from .stan.digests import value_digests
from .stan.units import resolve_privacy_unit

__all__ = ["Built", "LikelihoodRecipe"]


@dataclasses.dataclass(frozen=True)
class Built:
    """A built likelihood: the program's row likelihood, and what the run sees (it, or a privacy unit over it)."""

    likelihood: Any
    run_likelihood: Any


@dataclasses.dataclass(frozen=True)
class LikelihoodRecipe:
    """The public settings a run's likelihood is built from (as ``DPStanModel.sample`` takes them).

    data, row_data: the files the public data and the rows were given as (absolute paths), or None when they were
    given in memory; rows_separate: the rows came separately (``row_data=``); privacy_unit: the unit's data
    variable, or None; algorithm: the request's algorithm, which says what public program structure to attach
    (``stan_dp.methods.registry.reads``).
    """

    stan_file: str
    stanc_args: tuple[str, ...] = ()
    rows: str = "N"
    row_variables: tuple[str, ...] | None = None
    threads: int | None = None
    include_tp: bool = False
    include_gq: bool = False
    data: str | None = None
    row_data: str | None = None
    rows_separate: bool = False
    backend: str = "local"
    ray_workers: int | None = None
    privacy_unit: str | None = None
    max_rows_per_unit: int | None = None
    algorithm: str = "auto"

    def record(self) -> dict[str, Any]:
        """The recipe as a checkpoint stores it (plain JSON values)."""
        out = dataclasses.asdict(self)
        out["stanc_args"] = list(self.stanc_args)
        out["row_variables"] = None if self.row_variables is None else list(self.row_variables)
        return out

    @classmethod
    def from_record(cls, record: Mapping[str, Any], *, algorithm: str = "auto") -> "LikelihoodRecipe":
        """The recipe a checkpoint stored; ``algorithm``: the run's, for a record written before the recipe held
        it."""
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in record.items() if k in known}
        values.setdefault("algorithm", algorithm)
        values["stanc_args"] = tuple(values.get("stanc_args") or ())
        if values.get("row_variables") is not None:
            values["row_variables"] = tuple(values["row_variables"])
        return cls(**values)

    def build(self, model: Any, data: Any, row_data: Any = None, *, unit: Any = None, ray_address: str | None = None,
              leave_in_file: bool = False, digests: bool = False) -> Built:
        """The row likelihood of ``model`` (a ``DPStanModel`` of this recipe's program) on ``data`` with the rows
        of ``row_data`` (when given separately), and what the run sees: a privacy unit over it when ``unit`` (the
        unit's name, or its labels as an array) or the recipe's unit is given. ``leave_in_file``: rows in a
        Parquet file stay there for the Ray actors to read. ``digests``: bind the likelihood to its values by
        PRIVATE digests (a checkpointed run; they stay inside the checkpoint)."""
        rows = self.rows
        row_variables = None if self.row_variables is None else list(self.row_variables)
        data = model._with_rows(data, row_data, rows, row_variables, leave_in_file=leave_in_file)
        unit = self.privacy_unit if unit is None else unit
        labels, unit_name = None, None
        if unit is not None:  # checked against the program before any row meets a mechanism
            labels, unit_name = resolve_privacy_unit(unit, data, model.data_declarations, model._canonical,
                                                     rows=rows)
        likelihood = model.row_likelihood(data, rows=rows, row_variables=row_variables, threads=self.threads,
                                          backend=self.backend, ray_address=ray_address,
                                          ray_workers=self.ray_workers)
        try:
            if digests:  # the values the checkpoint is bound to (PRIVATE digests, kept inside the checkpoint only)
                likelihood.data_digests = value_digests(load_data(data), model.data_declarations)
            model.attach_structure(likelihood, data, rows, self.algorithm)
        except BaseException:
            likelihood.close()
            raise
        run_likelihood: Any = likelihood
        if labels is not None:  # every mechanism sees one "row" per unit (stan_dp.privacy.units)
            run_likelihood = UnitLikelihood(likelihood, labels, name=str(unit_name),
                                            max_rows_per_unit=self.max_rows_per_unit)
        return Built(likelihood, run_likelihood)

    @staticmethod
    def file_path(source: Any) -> str | None:
        """The absolute path of ``source`` when it names an existing file, else None."""
        if isinstance(source, (str, Path)) and not str(source).lstrip().startswith("{") and Path(source).is_file():
            return str(Path(source).resolve())
        return None
