"""``DPStanModel``: compile a Stan program once, split its data into rows, build its instances, and run the
private samplers or the non-private reference on it."""
from __future__ import annotations

import dataclasses
import hashlib
import re
from functools import cached_property
from pathlib import Path
from typing import Any

from .likelihood import PriorProgram, RowLikelihood
from .stan import toolchain
from .stan.data import (
    DataError,
    Declaration,
    load_data,
    parse_declarations,
    prior_data,
    row_range_data,
    split_rows,
    to_json,
)
from .stan.glm_program import row_bounds, unit_row_bounds
from .stan.row_tables import is_parquet_path, read_row_data, with_rows_read
from .stan.engine import (
    NativeError,
    RowData,
    RowDataError,
    RowInstances,
    ShardInstances,
    StanRowLikelihood,
    default_shards,
    default_threads,
    release_memory,
    shard_boundaries,
)
from .stan.backend_error import BackendError
from .stan.factorization import (  # noqa: F401 (public names)
    FACTORIZATION_RTOL,
    ModelError,
    check_factorization,
    check_range,
)
from .stan.stan_messages import withhold_data_values
from .stan.units import ARRAY_UNIT_NAME
from .privacy.units import SSP_UNIT_REFUSAL, check_max_rows_per_unit
from .recipe import LikelihoodRecipe
from .user_warnings import warn

#: where the rows live: in this process, or on Ray actors (stan_dp.stan.ray_rows)
BACKENDS = ("local", "ray")


def check_backend(backend: str) -> None:
    """Refuse a backend name that is not one of ``BACKENDS``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, not {backend!r}")


def _refuse_shard(engine: str, reason: str) -> None:
    """ModelError when the shard engine was asked for (``engine="shard"``) and cannot serve (``reason``: why)."""
    if reason and engine == "shard":
        raise ModelError(f"The shard engine is not available for this program and split: {reason}.")


class DPStanModel:
    """A Stan program compiled into a shared library that ``bridgestan`` loads.

    Args:
        stan_file: path of the Stan program. It is compiled on first use and cached (``$STAN_DP_CACHE`` or
            ``~/.cache/stan_dp``); constructing the same unchanged program again does not recompile.
        stanc_args: extra stanc3 arguments (part of the cache key).
        show_progress: say on stderr when a compilation starts and how long it took (silent when cached).

    Raises:
        StanCompileError: stanc rejected the program (the message carries stanc's text and Stan line).
        ToolchainError: no C++ compiler or Stan toolchain.
    """

    def __init__(self, stan_file: str | Path, *, stanc_args: tuple[str, ...] = (), show_progress: bool = True):
        self.stan_file = Path(stan_file).resolve()
        if not self.stan_file.is_file():
            raise FileNotFoundError(f"Stan program not found: {self.stan_file}")
        self.stanc_args = tuple(stanc_args)
        self.library_path: Path = toolchain.build_model_library(self.stan_file, self.stanc_args,
                                                                    progress=show_progress)
        #: the program without its data-free model statements, for the default row split (or None)
        self.row_program = toolchain.library_row_program(self.library_path)
        #: the program rewritten for shard instances (stan_dp.stan.shard_program), for the default split, or None and
        #: the reason why it has none
        self.shard_program, self.shard_refusal = toolchain.library_shard_program(self.library_path)
        self.source_hash = hashlib.sha256(self.stan_file.read_bytes()).hexdigest()
        self.name = toolchain.model_name_for(self.stan_file)

    def __repr__(self) -> str:
        return f"DPStanModel({str(self.stan_file)!r})"

    @cached_property
    def data_declarations(self) -> list[Declaration]:
        """The program's declared data variables (from stanc's canonical printing)."""
        return parse_declarations(self._canonical, "data")

    @cached_property
    def _canonical(self) -> str:
        """stanc's canonical printing of the program (read once per model)."""
        return toolchain.canonical_program(self.stan_file, self.stanc_args)

    def bridgestan(self, data: Any = None, *, seed: int = 1234):
        """A ``bridgestan.StanModel`` on this library and data (dict, JSON string or JSON file path).

        Data violating the program's declared constraints raise ``DataError`` with Stan's message.
        """
        import bridgestan

        text = to_json(load_data(data)) if data is not None else ""
        try:
            return bridgestan.StanModel(str(self.library_path), text, seed=seed, warn=False)
        except RuntimeError as exc:
            message = withhold_data_values(str(exc), self._declared_types())
            raise DataError(f"Stan rejected the data for {self.stan_file.name}: {message}") from None

    def _declared_types(self) -> dict[str, str]:
        """Data variable -> declared Stan type (program text, public), for messages about rejected data; empty
        when stanc cannot print the program."""
        try:
            return {d.name: d.type_text for d in self.data_declarations}
        except Exception:  # a message is being built: never let this replace it
            return {}

    # ------------------------------------------------------------------------------------------------ rows
    def row_likelihood(
        self,
        data: Any,
        *,
        row_data: Any = None,
        rows: str = "N",
        row_variables: list[str] | None = None,
        threads: int | None = None,
        check: bool = True,
        check_points: int = 4,
        engine: str = "auto",
        backend: str = "local",
        ray_address: str | None = None,
        ray_workers: int | None = None,
    ) -> StanRowLikelihood:
        """Split ``data`` into rows and public data and build the row-likelihood interface.

        Args:
            data: dict, Stan JSON string or JSON file path. Undeclared variables are ignored.
            row_data: the rows, when they are not in ``data``: a pandas or polars DataFrame, a pyarrow Table, a dict
                of NumPy arrays or the path of a .parquet / .csv file, with columns named like the row variables
                (``x.1 ... x.K`` or one list-typed column ``x`` for a vector per row;
                ``stan_dp.stan.row_tables.read_row_data``). ``data`` then holds the public data only; the row count
                and row sizes are set from the rows when it omits them.
            rows: name of the int data variable holding the row count.
            row_variables: override the inferred row variables (those whose first declared size is ``rows``).
            threads: threads per row evaluation (default: all cores).
            check: run the factorization check at ``check_points`` random unconstrained points, on at most
                ``stan_dp.stan.factorization.CHECK_ROWS`` contiguous rows (all rows when there are no more; why a
                bounded range suffices and what it cannot catch: ``stan_dp.stan.factorization.check_range``).
            engine: "auto" (shard instances when the library has a shard program for this split, else one
                instance per row), "shard" (an error when there is none) or "per-row". The engine taken is
                ``likelihood.row_engine``; ``likelihood.row_engine_reason`` says why the per-row one was taken.
            backend: "local" (the rows in this process) or "ray" (the rows split into contiguous shards held by Ray
                actors, ``stan_dp.stan.ray_rows``; ``pip install 'stan-dp[ray]'``). Noise is added on the driver either
                way and the draws are the same. With "ray" the engine is the one the program and split select (no
                fall-back after the factorization check, which each actor runs on its shard).
            ray_address: the Ray cluster to join (``ray.init(address=...)``; None starts a local one).
            ray_workers: number of Ray actors (shards); default: the cluster's CPUs divided by ``threads`` (1).

        Raises:
            DataError: missing variables, a row variable not of leading dimension N, N < 1, data that violate
                the declared constraints (``RowTableError``, a subclass, for bad ``row_data``).
            ModelError: the program rejects N = 0, has parameters sized by N, or does not factorise over rows.
        """
        if engine not in ("auto", "shard", "per-row"):
            raise ValueError(f"engine must be 'auto', 'shard' or 'per-row', not {engine!r}")
        check_backend(backend)
        raw = self._with_rows(data, row_data, rows, row_variables)
        split, kept = split_rows(self.data_declarations, raw, rows=rows, row_variables=row_variables)
        if backend != "ray":  # rows left in their file (read_row_data(..., keep=False)) are read here
            kept = with_rows_read(kept)
        likelihood = self._build_likelihood(kept, split, rows, engine, threads, check, check_points, backend,
                                            ray_address, ray_workers)
        # the data's SHAPES (names and dimensions, never values): what a checkpoint is bound to
        likelihood.data_shapes = {name: [int(n) for n in _shape(value)] for name, value in sorted(kept.items())}
        # the per-row bounds the program text gives (stan_dp.stan.glm_program; sizes from the public integers)
        sizes = {k: v for k, v in kept.items() if isinstance(v, int) and not isinstance(v, bool)}
        likelihood.row_bounds = row_bounds(self._canonical, rows, sizes)
        # the program and its public data with no rows: what a release-once method's posterior program is built on
        likelihood.prior_program = PriorProgram(text=self._canonical, data=prior_data(split, kept), name=self.name,
                                                stanc_args=tuple(self.stanc_args))
        return likelihood

    def _build_likelihood(self, kept: dict[str, Any], split: Any, rows: str, engine: str, threads: int | None, check: bool,
                          check_points: int, backend: str, ray_address: str | None,
                          ray_workers: int | None) -> StanRowLikelihood:
        """``row_likelihood`` on the split data."""
        if backend == "ray":
            return self._ray_likelihood(kept, split, engine, threads, check, check_points, ray_address, ray_workers)
        reason = self._shard_unavailable(split, engine)
        row_data = None
        if not reason:
            try:
                row_data = RowData(str(self.library_path), kept, split)
            except RowDataError as exc:
                reason = f"the shard engine reads rows as arrays of reals or ints: {exc}"
        _refuse_shard(engine, reason)
        shards = default_shards(split.n_rows, threads or default_threads()) if row_data is not None else None
        checked = check_range(split.n_rows, shard_boundaries(split.n_rows, shards) if shards else ())
        full, checked = self._full_instance(kept, split, row_data, checked)
        prior = self._prior_instance(kept, split)
        if prior.param_unc_num() != full.param_unc_num():
            raise ModelError(_SIZED_BY_N.format(rows=rows, prior=prior.param_unc_num(), full=full.param_unc_num(),
                                                counted=_counted(checked, split.n_rows)))
        if row_data is not None:
            likelihood = StanRowLikelihood(self._instances(row_data, split, threads, prior, shards), prior,
                                           split=split)
            if check:
                try:
                    check_factorization(likelihood, full, prior, points=check_points, rows=checked)
                except ModelError:
                    if engine == "shard":
                        raise
                    # No warning: whether the check fails is computed from the rows, so a warning would tell
                    # neighbouring data sets apart. The draws agree between the engines; the fit's attrs record
                    # the engine the program and the split select (public), and this reason stays on the
                    # likelihood object (``row_engine_reason``), which is the caller's private material like
                    # the rows.
                    reason = ("the shard instances failed the factorization check (a rewrite the package got "
                              "wrong, or rows on which the two engines' sums differ); the per-row engine is used "
                              "instead")
            if not reason:
                del full, row_data
                release_memory(str(self.library_path))
                return likelihood
            del likelihood
        del row_data
        likelihood = StanRowLikelihood(self._instances(kept, split, threads, prior), prior, split=split,
                                       engine_reason=reason)
        if check:
            check_factorization(likelihood, full, prior, points=check_points, rows=checked)
        return likelihood

    def _with_rows(self, data: Any, row_data: Any, rows: str, row_variables: list[str] | None,
                   leave_in_file: bool = False) -> dict[str, Any]:
        """The program's data: ``data`` (dict, JSON string or path), with the row variables read from ``row_data``
        (``stan_dp.stan.row_tables``) when it is given. ``leave_in_file``: rows from a Parquet file are read and
        checked but left there (``RowsInFile``), for an engine that reads them itself (the Ray backend)."""
        public = load_data(data)
        if row_data is None:
            return public
        keep = not (leave_in_file and is_parquet_path(row_data))
        return {**public, **read_row_data(row_data, self.data_declarations, public, rows=rows,
                                          row_variables=row_variables, keep=keep)}

    def _ray_likelihood(self, kept: dict[str, Any], split: Any, engine: str, threads: int | None, check: bool,
                        check_points: int, address: str | None, workers: int | None) -> StanRowLikelihood:
        """The row likelihood with its rows on Ray actors (``stan_dp.stan.ray_rows``)."""
        from .stan.ray_rows import RayShardRows

        reason = self._shard_unavailable(split, engine)
        _refuse_shard(engine, reason)
        prior = self._prior_instance(kept, split)
        use_row_program = self.row_program is not None and self.row_program.matches(split.count_name,
                                                                                     split.row_variables)
        try:
            instances = RayShardRows(str(self.library_path), kept, split, engine="per-row" if reason else "shard",
                                     row_program=use_row_program, workers=workers, threads=threads,
                                     address=address)
        except NativeError as exc:
            if "depends on the row count" in str(exc):
                raise ModelError(_SIZED_BY_N.format(rows=split.count_name, prior=prior.param_unc_num(),
                                                    full="?", counted="all rows")) from None
            raise DataError("Building the row instances failed: "
                            f"{withhold_data_values(str(exc), self._declared_types())}") from None
        if prior.param_unc_num() != instances.dim:
            raise ModelError(_SIZED_BY_N.format(rows=split.count_name, prior=prior.param_unc_num(),
                                                full=instances.dim, counted="all rows"))
        if check:
            instances.check_factorization(check_points)
        return StanRowLikelihood(instances, prior, split=split, engine_reason=reason)

    def _prior_instance(self, kept: dict[str, Any], split: Any) -> Any:
        """The data-free (N = 0) bridgestan instance, or ModelError when the program rejects N = 0."""
        rows = split.count_name
        try:
            return self.bridgestan(prior_data(split, kept))
        except DataError as exc:
            declared = next((d.type_text for d in self.data_declarations if d.name == rows), "int")
            raise ModelError(no_rows_message(rows, declared, str(exc).split(": ", 1)[-1])) from None

    def _shard_unavailable(self, split: Any, engine: str) -> str:
        """Why the shard engine cannot serve this split ("" when it can)."""
        if engine == "per-row":
            return "the per-row engine was asked for"
        if self.shard_program is None:
            return self.shard_refusal
        if not self.shard_program.matches(split.count_name, split.row_variables):
            return "the shard program was derived for the default row split (N and the variables sized by N)"
        return ""

    def _full_instance(self, kept: dict[str, Any], split: Any, row_data: "RowData | None", checked: range
                       ) -> tuple[Any, range]:
        """(the user's unchanged program on the rows ``checked`` (for the factorization and dimension checks),
        those rows): from the binary row data when there is some, else through bridgestan and JSON. When the
        program rejects the range but it is not all rows (e.g. a public variable bounded by the row count), the
        program on all rows and ``range(N)``. Data violating the declared constraints raise DataError with Stan's
        message (rows outside the range break them when the engine's instances are built, which then builds this
        on all rows for the same message)."""
        n = split.n_rows
        try:
            if row_data is None:
                data = kept if len(checked) == n else row_range_data(split, kept, checked.start, len(checked))
                return self.bridgestan(data), checked
            try:
                return row_data.program("user", checked.start, len(checked)), checked
            except NativeError as exc:
                message = withhold_data_values(str(exc).replace("Error in sdp_program_construct: ", ""),
                                               self._declared_types())
                raise DataError(f"Stan rejected the data for {self.stan_file.name}: {message}") from None
        except DataError:
            if len(checked) == n:
                raise
        return self._full_instance(kept, split, row_data, range(n))

    def _instances(self, source: Any, split: Any, threads: int | None, prior: Any, shards: int | None = None
                   ) -> Any:
        """Shard instances from RowData (``shards`` of them, default ``default_shards``), or one instance per row
        from the data dict."""
        rows = split.count_name
        try:
            if isinstance(source, RowData):
                return ShardInstances(str(self.library_path), source, threads=threads, shards=shards)
            use_row_program = self.row_program is not None and self.row_program.matches(
                split.count_name, split.row_variables)
            return RowInstances(str(self.library_path), source, split, threads=threads, row_program=use_row_program)
        except NativeError as exc:
            if "depends on the row count" in str(exc):
                raise ModelError(_SIZED_BY_N.format(rows=rows, prior=prior.param_unc_num(), full="?",
                                                    counted="all rows")) from exc
            # A row outside the factorization check's range that breaks a declared bound: the user's program on
            # all rows gives Stan's message, as the check on all rows did, so that the message is the same
            # whichever row it is (it never says whether the row was among the checked ones).
            self._full_instance(source if isinstance(source, dict) else {}, split,
                                source if isinstance(source, RowData) else None, range(split.n_rows))
            raise DataError(f"Building the row instances failed: {self._instance_message(str(exc))}") from None

    def _instance_message(self, text: str) -> str:
        """Stan's message from building the row instances, data values withheld, without the C++ namespace and
        without the line of a program the package derived (the shard or row program: its lines are not the
        user's)."""
        message = _NAMESPACE.sub("", withhold_data_values(text, self._declared_types()).strip())
        return _DERIVED_LOCATION.sub(lambda m: "" if m.group(1) != self.stan_file.name else m.group(0), message)

    # ------------------------------------------------------------------------------------------------ runs
    def sample(self, data: Any, *, row_data: Any = None, algorithm: str = "auto", epsilon: float, delta: float,
               chains: int = 4, iter_warmup: int | None = None, iter_sampling: int | None = None,
               seed: int | None = None, show_progress: bool = True, rows: str = "N",
               row_variables: list[str] | None = None, threads: int | None = None, include_tp: bool = False,
               include_gq: bool = False, inits: Any = None, backend: str = "local", ray_address: str | None = None,
               ray_workers: int | None = None, checkpoint: str | Path | None = None,
               checkpoint_every: int | float | str | None = None, privacy_unit: Any = None,
               max_rows_per_unit: int | None = None, **options: Any):
        """Differentially private posterior draws as ArviZ data (``arviz.InferenceData`` on arviz 0.x,
        ``xarray.DataTree`` on arviz 1.x), with the privacy metadata and the Stan version in the root attrs.

        The (epsilon, delta) budget covers the whole run: all chains, warmup and sampling iterations and every
        mechanism invocation. Noise is calibrated from it before the run.

        algorithm: "auto" (default: chosen from public quantities and the bounds you give; it needs a bound, e.g.
        ``grad_clip``) or a name in ``stan_dp.samplers.ALGORITHMS``. A privacy-relevant bound never has a silent
        default: without the bound an algorithm needs, the call raises ``ValueError`` naming it and how to choose it,
        before the data are read.

        iter_warmup, iter_sampling: None (default) chooses them per algorithm from public quantities
        (``stan_dp.methods.kernels.run_lengths``; the choice is in ``attrs["run_lengths_reason"]``); explicit values are used.

        inits: a dict of constrained values by parameter name (as in CmdStanPy), a list of such dicts (one per
        chain), the path of a JSON file holding either, or unconstrained values / a radius as taken by
        ``sample_private``. Dicts are transformed with the data-free instance (``stan_dp.stan.inits``); they must be
        public values chosen without looking at the rows. See ``stan_dp.run.pipeline.sample_private``
        for the run options (inits, step_size, target_accept, metric, save_warmup, debug) and each algorithm's
        docstring for its options (``ratio_clip``, ``grad_clip``, ``leapfrog_steps``, ``row_bound``, ...).

        row_data: the rows as a data frame, Arrow table, dict of NumPy arrays or Parquet / CSV path, when ``data``
        holds only the public data (see ``row_likelihood``). They are read after every check that needs no row.

        backend, ray_address, ray_workers: where the rows are evaluated (``row_likelihood``): "local", or "ray" for
        rows sharded over Ray actors (noise is still drawn and added only here, on the driver; the draws equal the
        local engine's). A Ray worker lost mid-run raises ``stan_dp.BackendError`` whose ``partial_fit`` holds the
        draws made so far with the budget they spent; a rerun spends a new budget.

        checkpoint, checkpoint_every: write checkpoints into this directory (every ``checkpoint_every`` iterations
        of each chain, or seconds as "30s"; default every 60 s); a killed run continues with ``stan_dp.resume(DIR,
        data=...)`` under its planned budget. The checkpoint is PRIVATE material (it predicts the noise still to
        come): keep it with the data. With ``backend="ray"``, a lost worker stops the run (``BackendError``) and
        ``stan_dp.resume`` continues it from its last checkpoint, on the same or a new cluster. See
        ``stan_dp.run.pipeline.sample_private``.

        privacy_unit: None (one row is the unit of privacy) or the name of an int data variable with one label per
        row (``array[N] int person;``; the program must not use it otherwise), or such an int array. The guarantee
        then covers ALL rows of one unit: per-unit sums of the rows' log-likelihoods and gradients are what the
        mechanisms clip, minibatches sample units, and the number of units is public (``attrs["n_units"]``, also
        the accounting's ``attrs["N"]``); the clip bounds bound one unit's total (docs: privacy units). dp-ssp is
        refused with a unit. max_rows_per_unit: a public cap on the rows a unit contributes (its first rows in data
        order are kept; the number dropped is never released); it also makes the anchored runs' default curvature
        bound and posterior-scale guess per unit (``stan_dp.phases.public_scale``). With ``checkpoint`` the unit must
        be a name: the checkpoint stores it (never the labels) and ``stan_dp.resume`` reads the labels from the data.
        """
        from .run.request import make_request, request_keywords
        from .stan.inits import load_inits

        request = make_request(algorithm=algorithm, epsilon=epsilon, delta=delta, chains=chains,
                               iter_warmup=iter_warmup, iter_sampling=iter_sampling, seed=seed,
                               **request_keywords(options))
        # an algorithm that cannot run with these options (a missing bound above all) fails before any row is read
        max_rows_per_unit = self._check_request(request.algorithm, dict(request.options), rows=rows,
                                                privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit,
                                                checkpoint=checkpoint)
        inits = load_inits(inits)  # a bad inits file fails before any row is read
        check_backend(backend)
        recipe = self._recipe(data, row_data, rows=rows, row_variables=row_variables, threads=threads,
                              include_tp=include_tp, include_gq=include_gq, backend=backend, ray_workers=ray_workers,
                              privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit, algorithm=algorithm)
        # on Ray, rows from a Parquet file are checked here and read by the actors (each its own shard) unless a
        # privacy unit's labels must be read from them on this side
        built = recipe.build(self, data, row_data, unit=privacy_unit, ray_address=ray_address,
                             leave_in_file=backend == "ray" and privacy_unit is None, digests=checkpoint is not None)
        likelihood, run_likelihood = built.likelihood, built.run_likelihood
        if checkpoint is not None:  # what stan_dp.resume needs to build this likelihood again (public)
            run_likelihood.checkpoint_context = recipe.record()
            options.update(checkpoint=checkpoint, checkpoint_every=checkpoint_every)
        del data  # the engine holds its own copy of the rows; the arrays read from row_data can go
        try:
            fit = self._sample_private(likelihood, run_likelihood, inits, algorithm=algorithm, epsilon=epsilon, delta=delta,
                                       chains=chains, iter_warmup=iter_warmup, iter_sampling=iter_sampling,
                                       seed=seed, show_progress=show_progress, include_tp=include_tp,
                                       include_gq=include_gq, **options)
        except BackendError as exc:
            if exc.partial_fit is not None:
                self._stamp(exc.partial_fit, likelihood)
            raise
        finally:
            likelihood.close()
        self._stamp(fit, likelihood)
        return fit

    def _recipe(self, data: Any, row_data: Any, *, row_variables: list[str] | None, privacy_unit: Any,
                **settings: Any) -> LikelihoodRecipe:
        """The recipe of a run's likelihood (public settings; the data's files when they were given as files; of a
        privacy unit only its name)."""
        return LikelihoodRecipe(
            str(self.stan_file), tuple(self.stanc_args),
            row_variables=None if row_variables is None else tuple(row_variables),
            data=LikelihoodRecipe.file_path(data),
            row_data=None if row_data is None else LikelihoodRecipe.file_path(row_data),
            rows_separate=row_data is not None, privacy_unit=privacy_unit if isinstance(privacy_unit, str) else None,
            **settings)

    def _check_request(self, algorithm: str, options: dict[str, Any], *, rows: str, privacy_unit: Any,
                       max_rows_per_unit: Any, checkpoint: Any) -> int | None:
        """Refuse a request that can never run, before any row is read: the unit's cap and name, and the
        algorithm with its options (``stan_dp.run.plan.check_request``, with what the program text says about
        its public bounds). Returns the checked ``max_rows_per_unit``."""
        from .methods import registry
        from .run.plan import check_request
        from .stan.linear_program import ssp_ready

        algorithm_options = options  # the method's own (RunRequest.options)
        max_rows_per_unit = check_max_rows_per_unit(max_rows_per_unit)
        if privacy_unit is None and max_rows_per_unit is not None:
            raise ValueError("max_rows_per_unit caps the rows of one privacy unit: give privacy_unit as well.")
        if privacy_unit is not None and checkpoint is not None and not isinstance(privacy_unit, str):
            raise ValueError("checkpoints with a privacy unit need the unit as the NAME of an int data variable "
                             "(privacy_unit='person'): the checkpoint stores the name, never the labels, and "
                             "stan_dp.resume reads the labels again from the data. Add the labels to the data "
                             "under a name, or run without checkpoint=.")
        if privacy_unit is not None and registry.needs_unit_cap(algorithm) and max_rows_per_unit is None:
            raise ValueError(f"algorithm {algorithm!r} with a privacy unit: {SSP_UNIT_REFUSAL}.")
        chooser = registry.is_auto(algorithm)
        ready = chooser and privacy_unit is None and ssp_ready(self.stan_file, rows, algorithm_options, self.stanc_args)
        named = None if privacy_unit is None else privacy_unit if isinstance(privacy_unit, str) else ARRAY_UNIT_NAME
        # with a unit, one unit's bound: k times a row's with the public cap k, or a refusal saying what to give
        derivable = (unit_row_bounds(row_bounds(self._canonical, rows), named, max_rows_per_unit)
                     if chooser else None)
        check_request(algorithm, algorithm_options, ssp_ready=ready, row_bounds=derivable)
        return max_rows_per_unit

    def attach_structure(self, likelihood: StanRowLikelihood, data: Any, rows: str, algorithm: str) -> None:
        """Attach the public program structure a request for ``algorithm`` plans from
        (``stan_dp.methods.registry.reads``: a normal linear regression's for dp-ssp, a logistic or Poisson one's for
        dp-glm, both for auto)."""
        from .methods import registry

        needed = registry.reads(algorithm)
        if "linear" in needed:  # dp-ssp's public linear structure (a unit offers it with a cap)
            self.attach_linear(likelihood, data, rows)
        if "glm" in needed:  # dp-glm's public regression structure (likewise)
            self.attach_glm(likelihood, data, rows)

    def attach_linear(self, likelihood: StanRowLikelihood, data: Any, rows: str = "N") -> None:
        """Give ``likelihood`` (built by :meth:`row_likelihood` on ``data``) the public linear structure of the
        program (``linear_spec``: covariates, declared bounds, the data-free map to (a, b, sigma)) and
        ``linear_rows`` (x and y of ``data``), or ``linear_refusal``: why the program is not a normal linear
        regression dp-ssp can use. ``sample`` does this itself for dp-ssp and auto; call it on a likelihood of
        PUBLIC data before ``stan_dp.advise`` so that dp-ssp is among its candidates. It keeps a copy of x and y."""
        import numpy as np

        from .likelihood import LinearSpec
        from .stan.linear_program import NotLinear, recognise_linear_program
        from .stan.regression_rows import regression_rows, regression_terms

        likelihood.linear_spec, likelihood.linear_refusal = None, None
        try:
            program = recognise_linear_program(self._canonical, rows)
        except NotLinear as exc:
            likelihood.linear_refusal = f"{self.stan_file.name}: {exc}"
            return
        raw = with_rows_read(load_data(data))
        n = int(likelihood.n_rows)
        found = regression_rows(program, raw, n)
        x, y, names, lower, upper = found.x, found.y, list(found.names), found.lower, found.upper
        y_lo, y_hi = program.bounds[program.outcome]
        prior = likelihood.prior_model
        param_names = list(prior.param_names(include_tp=True))

        def indices(ref: str) -> list[int] | float:
            if ref[0].isdigit() or ref[0] in "-.":
                return float(ref)
            base = ref.replace("]", "").replace("[", ".")
            if base in param_names:
                return [param_names.index(base)]
            found = [i for i, p in enumerate(param_names) if p.startswith(ref + ".")]
            if not found:
                raise NotLinear(f"{ref} is not a parameter or transformed parameter")
            return found

        try:
            intercept = [indices(r) for r in program.intercept]
            slopes = [indices(r) for r in program.slopes]
            scale = indices(program.scale)
        except NotLinear as exc:
            likelihood.linear_refusal = f"{self.stan_file.name}: {exc}"
            return
        if sum(1 if isinstance(s, float) else len(s) for s in slopes) != x.shape[1]:
            likelihood.linear_refusal = f"{self.stan_file.name}: the slopes do not match the covariates' columns"
            return

        def pick(values: np.ndarray, ref: list[int] | float) -> np.ndarray:
            return np.array([ref]) if isinstance(ref, float) else values[ref]

        def coefficients(theta: np.ndarray) -> tuple[float, np.ndarray, float]:
            values = np.asarray(prior.param_constrain(np.asarray(theta, dtype=float), include_tp=True))
            a = float(sum(float(pick(values, r).sum()) for r in intercept))
            b = np.concatenate([pick(values, r) for r in slopes]) if slopes else np.zeros(0)
            return a, b, float(pick(values, scale)[0])

        have_x = not any(np.isnan(lower) | np.isnan(upper))
        terms = regression_terms(program, scale=program.scale)
        likelihood.linear_spec = LinearSpec(
            n_covariates=x.shape[1], column_names=tuple(names) + (program.outcome,), outcome_name=program.outcome,
            coefficients=coefficients, x_bounds=(np.array(lower), np.array(upper)) if have_x else None,
            y_bounds=(y_lo, y_hi) if y_lo is not None and y_hi is not None else None, terms=terms)
        likelihood.linear_rows = lambda: (x, y)

    def attach_glm(self, likelihood: StanRowLikelihood, data: Any, rows: str = "N") -> None:
        """Give ``likelihood`` (built by :meth:`row_likelihood` on ``data``) the public structure of a logistic or
        Poisson regression program (``glm_spec``: family, covariates, declared bounds, coefficient references) and
        ``glm_rows`` (x and y of ``data``), or ``glm_refusal``: why the program is not one dp-glm can use.
        ``sample`` does this itself for dp-glm and auto. It keeps a copy of x and y."""
        from .stan.glm_program import NotGLM, recognise_glm_program
        from .stan.regression_rows import glm_spec, regression_rows

        likelihood.glm_spec, likelihood.glm_refusal = None, None
        try:
            program = recognise_glm_program(self._canonical, rows)
        except NotGLM as exc:
            likelihood.glm_refusal = f"{self.stan_file.name}: {exc}"
            return
        found = regression_rows(program, with_rows_read(load_data(data)), int(likelihood.n_rows))
        likelihood.glm_spec = glm_spec(program, found)
        likelihood.glm_rows = lambda: (found.x, found.y)

    def _stamp(self, fit: Any, likelihood: StanRowLikelihood) -> None:
        """The public facts about the compiled program a fit's attrs record."""
        fit.attrs["stanc_version"] = toolchain.find_toolchain().stanc_version
        # the engine the PROGRAM and the row split select (public); a fall-back to per-row instances after the
        # factorization check on the rows (or the rows' array read) depends on the rows and is not recorded
        # (the draws agree between the engines to 1e-12 either way)
        fit.attrs["row_engine"] = "per-row" if self._shard_unavailable(likelihood.split, "auto") else "shard"

    def _sample_private(self, likelihood: StanRowLikelihood, run_likelihood: Any, inits: Any, *, include_tp: bool,
                        include_gq: bool, seed: int | None, **run: Any):
        """``sample_private`` on ``run_likelihood`` (the built row likelihood ``likelihood``, or a privacy unit over
        it), with the inits resolved and the release configured on ``likelihood`` (data-free)."""
        from .run.pipeline import sample_private
        from .stan.inits import resolve_inits

        inits = resolve_inits(inits, likelihood.prior_model, run["chains"])
        likelihood.set_release(include_tp=include_tp, include_gq=include_gq, seed=seed)
        if include_gq:
            self._warn_dropped_quantities(likelihood)
        return sample_private(run_likelihood, seed=seed, model_name=self.name, source_hash=self.source_hash,
                              inits=inits, **run)

    def _warn_dropped_quantities(self, likelihood: StanRowLikelihood) -> None:
        """Warn, by name, about generated quantities that the release (computed with N = 0) leaves out.

        The declared names come from stanc's ``--info`` (no second, full-data model instance is built): a
        declared variable with at least one dimension that the data-free instance does not list is empty there,
        i.e. sized by the row count."""
        def bases(names: list[str]) -> list[str]:
            return list(dict.fromkeys(n.split(".")[0].split("[")[0] for n in names))

        info = toolchain.stanc_info(self.stan_file, self.stanc_args)
        released = set(bases(likelihood.prior_model.param_names(include_tp=True, include_gq=True)))
        dropped = [name for block in ("parameters", "transformed parameters", "generated quantities")
                   for name, decl in info.get(block, {}).items()
                   if name not in released and int(decl.get("dimensions", 0)) > 0]
        if dropped:
            warn(
                f"include_gq: the generated quantities {', '.join(dropped)} are sized by the row count and are not "
                "released: released quantities are computed without the private rows (N = 0), where they are "
                "empty. Compute per-row quantities outside the private release, from public inputs only.",
                UserWarning)

    def reference(
        self,
        data: Any,
        *,
        row_data: Any = None,
        chains: int = 4,
        iter_warmup: int = 1000,
        iter_sampling: int = 1000,
        seed: int | None = None,
        show_progress: bool = True,
        backend: str = "auto",
        **options: Any,
    ):
        """Non-private Stan NUTS on all rows, as ArviZ data of the installed line (attrs say it is not private).

        backend: "builtin" (Stan's own NUTS service compiled into this library), "cmdstan" (CmdStan through
        cmdstanpy) or "auto" (cmdstan when cmdstanpy finds a working CmdStan, else builtin).

        row_data: the rows as a data frame, Arrow table, dict of NumPy arrays or Parquet / CSV path, when ``data``
        holds only the public data (the row count is ``N``; see ``row_likelihood``).
        """
        from .stan.reference import NutsSettings, run_reference

        if row_data is not None:
            data = self._with_rows(data, row_data, "N", None)
        settings = NutsSettings(chains=chains, iter_warmup=iter_warmup, iter_sampling=iter_sampling, seed=seed,
                                **options)
        return run_reference(self, data, settings, show_progress=show_progress, backend=backend)


def resume(directory: str | Path, data: Any = None, *, likelihood: RowLikelihood | None = None,
           show_progress: bool = True,
           stop_event: Any = None, backend: str | None = None, ray_address: str | None = None,
           ray_workers: int | None = None):
    """Continue the private run whose checkpoint is in ``directory`` and return what the uninterrupted run would
    have returned: the same draws (bit for bit when seeded) and the same privacy report, the PLANNED budget (no new
    spend; ``attrs["resumed"] == 1``).

    data: the run's data again (dict, Stan JSON string or file); None reads the data file the run was started with
        (when it was given as a file; with ``row_data=``, its public data file and row file, when both were files).
        The data must be the run's own: the same shapes (names, dimensions, row count) and the same values (the
        checkpoint holds a private digest of every variable's values; a difference is refused by the name of the
        variable, never with a value).
    likelihood: for a run started with ``stan_dp.sample_private`` on a likelihood object (not a Stan program),
        that object again.
    stop_event: as in ``sample_private`` (a resumed run stopped early can be resumed again).
    backend, ray_address, ray_workers: where the rows are evaluated now, as in ``DPStanModel.sample``; None keeps
        the run's backend and number of Ray actors (a Ray run lost to a failed worker continues on a new cluster
        given by ``ray_address``). The same actor count gives the draws of the uninterrupted Ray run.

    A checkpoint can be resumed until its run publishes its whole result; then it is marked finished and refused:
    resuming it again would draw the same noise a second time, which the budget does not cover. A run stopped early
    (Ctrl-C, SIGTERM, a stop event, a lost Ray worker) publishes its partial result and checkpoints exactly the
    iterations it published, so that the resumed run continues after them and never draws one again.
    Raises ``stan_dp.phases.checkpoint.CheckpointError`` (a ``ValueError``) for a finished run, another program,
    data of other shapes or values, or a corrupted or truncated checkpoint, before anything is released.
    """
    from .phases.checkpoint import CheckpointError, load_checkpoint
    from .run.pipeline import resume_private

    found = load_checkpoint(directory)  # a finished, missing or corrupted checkpoint is refused before any compile
    if likelihood is not None:
        return resume_private(directory, likelihood, show_progress=show_progress, stop_event=stop_event)
    context = found.context
    if "stan_file" not in context:
        raise CheckpointError(f"the checkpoint in {directory} was written by sample_private on a likelihood object; "
                              "pass that object again: stan_dp.resume(DIR, likelihood=...)")
    row_data = None
    if data is None:
        data, row_data = context.get("data"), context.get("row_data")
        if context.get("rows_separate") and (data is None or row_data is None):
            raise CheckpointError("the run's public data and rows (row_data) were not both given as files; pass all "
                                  "the data again as one dict: stan_dp.resume(DIR, data={**public, **rows}), the rows "
                                  "as arrays (stan_dp.stan.row_tables.read_row_data gives them)")
        if data is None:
            raise CheckpointError("the run's data were not given as a file; pass them again: "
                                  "stan_dp.resume(DIR, data=...) or stan-dp resume DIR --data FILE")
    recipe = LikelihoodRecipe.from_record(context, algorithm=found.run.get("algorithm", "auto"))
    model = DPStanModel(recipe.stan_file, stanc_args=recipe.stanc_args, show_progress=show_progress)
    if model.source_hash != found.header["program_sha256"]:
        raise CheckpointError(f"the checkpoint in {directory} belongs to another program: {model.stan_file} has "
                              "changed since the run started; resume it with the program it was started with")
    backend = backend or recipe.backend
    check_backend(backend)
    if backend == "ray" and ray_workers is None:
        ray_workers = recipe.ray_workers
    recipe = dataclasses.replace(recipe, backend=backend, ray_workers=ray_workers)
    built = recipe.build(model, data, row_data, ray_address=ray_address, digests=True)
    try:
        built.likelihood.set_release(include_tp=recipe.include_tp, include_gq=recipe.include_gq,
                                     seed=found.run.get("seed"))
        fit = resume_private(directory, built.run_likelihood, show_progress=show_progress,
                             source_hash=model.source_hash, stop_event=stop_event)
    finally:
        built.likelihood.close()
    model._stamp(fit, built.likelihood)
    return fit


def _shape(value: Any) -> tuple[int, ...]:
    """The dimensions of one data value (a number, a nested list or an array)."""
    import numpy as np

    return tuple(np.shape(value))


def declared_positive(declared: str) -> bool:
    """Whether a declared type (``int<lower=1>``) has a literal lower bound above 0 (program text; public)."""
    bound = re.search(r"lower\s*=\s*([^,>]+)", declared)
    try:
        return bound is not None and float(bound.group(1)) > 0
    except ValueError:  # a bound given by an expression: Stan's message says what it is
        return False


def zero_rows_refusal(rows: str, declared: str, stan_said: str | None = None) -> str | None:
    """The refusal of a row count declared with a literal lower bound above 0 (``int<lower=1> N``): stan-dp
    evaluates the program with no rows for the data-free prior. None when the declaration allows 0. Needs only
    the program text, so the command line gives it before compiling; ``stan_said``: Stan's message, when known."""
    if not declared_positive(declared):
        return None
    said = "" if stan_said is None else f" (Stan said: {' '.join(stan_said.split())})"
    return (f"The program rejects {rows} = 0 (no rows), which stan-dp evaluates for the data-free prior: "
            f"{rows} is declared '{declared} {rows}'{said}.\n"
            f"Declare it as 'int<lower=0> {rows};' and make the program valid with no rows.")


def no_rows_message(rows: str, declared: str, stan_said: str) -> str:
    """Why the program cannot be evaluated with ``rows`` = 0, which the data-free prior instance needs: the first
    line names the cause with Stan's own message, the second what to do. ``declared`` is the row count's declared
    type (``int<lower=1>``): only a lower bound above 0 is blamed on the declaration."""
    said = " ".join(stan_said.split())
    refusal = zero_rows_refusal(rows, declared, stan_said)
    if refusal is not None:
        return refusal
    return (f"The program fails with {rows} = 0 (no rows), which stan-dp evaluates for the data-free prior; Stan "
            f"said: {said}\n"
            "If that points at transformed data that summarises the rows (mean, sd, ...), the summary pools rows: the "
            "likelihood does not factorise over rows and the summary leaks private data; use public constants "
            "instead. Otherwise make the program valid with no rows.")


#: the C++ prefix of a Stan runtime message, and the location in a program file (the package's derived programs
#: are named after the user's: ``m_shard.stan``, ``m_rows.stan``)
_NAMESPACE = re.compile(r"^\w+_namespace::\w+:\s*")
_DERIVED_LOCATION = re.compile(r"\s*\(([\w.-]+\.stan), line \d+\)")


def _counted(checked: range, n_rows: int) -> str:
    """How many rows the user's program was built on for the dimension check, in words."""
    return "all rows" if len(checked) == n_rows else f"{len(checked)} rows"


_SIZED_BY_N = (
    "The program's parameters are sized by the row count '{rows}' (unconstrained dimension {prior} with no rows, "
    "{full} with {counted}). Per-row latent parameters cannot be released privately: their draws would reveal the "
    "rows. Integrate them out of the likelihood, or move them to generated quantities of a non-private analysis."
)
