"""The Ray backend: rows sharded over Ray actors give the same draws as the local engine for every kernel (and
dp-laplace, the adaptive clip, the difference quantile and runs with a non-finite row), a lost actor stops the run
with a clear error and the partial fit, errors leave actors without data values, actors that run other code than
the driver are refused, and a subclass's override of the rows is honoured.

One local Ray cluster for the module (2 worker processes hold the shared likelihood's shards, 2 more the likelihoods
with non-finite rows; 2 more CPUs for the actors built and closed by single tests). Timings are in benchmarks/bench_ray.py, not here.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import stan_dp

ray = pytest.importorskip("ray")

from stan_dp import BackendError  # noqa: E402
from stan_dp.run.pipeline import sample_private  # noqa: E402
from stan_dp.stan import ray_rows  # noqa: E402
from stan_dp.stan.engine import NativeError, StanRowLikelihood  # noqa: E402

pytestmark = pytest.mark.stan
ROOT = Path(__file__).resolve().parents[2]
WORKERS = 2

#: every kernel (and the hybrid and an anchored run) with small public options, short runs
RUNS = {
    "penalty": dict(ratio_clip=2.0),
    "dp-hmc": dict(ratio_clip=2.0, grad_clip=2.0, leapfrog_steps=3, anchor="none"),
    "dp-fast-mh": dict(row_bound=2.0),
    "dp-sgld": dict(grad_clip=2.0),
    "dp-sghmc": dict(grad_clip=2.0),
    "dp-sgnht": dict(grad_clip=2.0),
    "ops": dict(loglik_bounds=(-6.0, 0.0), max_depth=3),
    "hybrid": dict(then="dp-sgld", loglik_bounds=(-6.0, 0.0), grad_clip=2.0, warm_start_warmup=20,
                   warm_start_thin=2),
    "dp-sgld+anchor": dict(grad_clip=2.0, anchor="dp-gd"),
}


def _data(n: int = 61, seed: int = 7) -> dict:
    rng = np.random.default_rng(seed)
    return {"N": n, "K": 3, "x": rng.normal(size=(n, 3)), "y": rng.integers(0, 2, n), "prior_sd": 2.5}


@pytest.fixture(scope="module")
def cluster():
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)
    # Ray starts its workers at niceness 15; beside other busy test processes (CI runs two suites on two cores) the
    # actors then get a small share of a core and each call waits on them (measured: this file took 232 s beside two
    # busy loops, 112 s with the workers at niceness 0, 64 s on an idle machine).
    ray.init(num_cpus=3 * WORKERS, include_dashboard=False, log_to_driver=False, _system_config={"worker_niceness": 0},
             runtime_env={"env_vars": {"PYTHONPATH": path, "STAN_DP_CACHE": os.environ.get("STAN_DP_CACHE", "")}})
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def likelihoods(cluster, stan_model):
    model = stan_model("logistic")
    data = _data()
    local = model.row_likelihood(data, threads=1)
    remote = model.row_likelihood(data, backend="ray", ray_workers=WORKERS)
    yield model, data, local, remote
    remote.close()


def test_rows_are_sharded_and_values_equal_the_local_engine(likelihoods):
    _, _, local, remote = likelihoods
    assert remote.row_backend == "ray" and local.row_backend == "local"
    assert remote.row_engine == local.row_engine == "shard"
    assert list(remote._rows.starts) == [0, 30, 61] and remote.n_rows == 61
    rng = np.random.default_rng(3)
    theta = rng.normal(size=remote.dim)
    rows = rng.integers(0, 61, size=40)  # crosses both shards, with repeats, in no order
    for a, b in zip(local.row_log_lik_grad(theta, rows), remote.row_log_lik_grad(theta, rows)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(local.row_log_lik(theta), remote.row_log_lik(theta))
    np.testing.assert_array_equal(local.log_prior_grad(theta)[1], remote.log_prior_grad(theta)[1])
    assert remote.row_log_lik(theta, np.array([], dtype=np.int64)).shape == (0,)


# penalty in the quick tier; the other kernels' runs through the actors in the full suite
@pytest.mark.parametrize("name", [n if n == "penalty" else pytest.param(n, marks=pytest.mark.slow) for n in RUNS])
def test_draws_equal_the_local_engine(likelihoods, name):
    _, _, local, remote = likelihoods
    algorithm = name.split("+")[0]
    run = dict(algorithm=algorithm, epsilon=2.0, delta=1e-4, chains=2, iter_warmup=6, iter_sampling=6, seed=11,
               show_progress=False, **RUNS[name])
    with pytest.warns():  # short runs warn about convergence (and run lengths); not what this test checks
        a = sample_private(local, **run)
        b = sample_private(remote, **run)
    for var in a.posterior.data_vars:
        np.testing.assert_allclose(b.posterior[var].values, a.posterior[var].values, rtol=0, atol=1e-12)
    assert a.attrs["epsilon"] == b.attrs["epsilon"]
    assert a.attrs["privacy_mechanisms"] == b.attrs["privacy_mechanisms"]


#: runs beyond the kernels: dp-laplace (releases at Newton points), the adaptive clip (noisy counts of per-row norms
#: on the actors' values) and the anchor-difference quantile (counts at public probe points)
MORE_RUNS = {
    "dp-laplace": dict(grad_clip=2.0, anchor_steps=4, newton_steps=2),
    "dp-sgld+adaptive": dict(grad_clip=2.0, anchor="dp-gd", anchor_steps=6, clip="adaptive"),
    "dp-sgld+diffq": dict(grad_clip=2.0, anchor="dp-gd", anchor_steps=6, clip="adaptive", diff_clip_steps=4),
}


def _same_draws(local, remote, algorithm, options, iterations=(6, 6)):
    run = dict(algorithm=algorithm, epsilon=2.0, delta=1e-4, chains=2, iter_sampling=iterations[1], seed=11,
               show_progress=False, **options)
    if algorithm != "dp-laplace":
        run["iter_warmup"] = iterations[0]
    with warnings.catch_warnings():  # short runs warn about convergence; not what these tests check
        warnings.simplefilter("ignore")
        a = sample_private(local, **run)
        b = sample_private(remote, **run)
    # identical up to the order of the additions (the actors' per-shard clipped sums are added on the driver)
    for var in a.posterior.data_vars:
        np.testing.assert_allclose(b.posterior[var].values, a.posterior[var].values, rtol=0, atol=1e-12)
    assert a.attrs["privacy_mechanisms"] == b.attrs["privacy_mechanisms"]
    for key in ("anchor_theta", "anchor_gradient", "diff_clip", "clip_bound", "laplace_theta_hat", "laplace_gradient",
                "laplace_curvature"):
        assert (key in a.attrs) == (key in b.attrs), key
        if key in a.attrs:
            np.testing.assert_allclose(np.asarray(json.loads(str(b.attrs[key])), dtype=float),
                                       np.asarray(json.loads(str(a.attrs[key])), dtype=float), rtol=1e-12, atol=1e-12,
                                       err_msg=key)
    return a, b


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MORE_RUNS))
def test_laplace_adaptive_clip_and_difference_quantile_draws_equal_the_local_engine(likelihoods, name):
    """dp-laplace, clip='adaptive' and the difference quantile (diff_clip_steps): same seed, identical draws and
    released statistics on the Ray backend and the local engine."""
    _, _, local, remote = likelihoods
    a, _ = _same_draws(local, remote, name.split("+")[0], MORE_RUNS[name])
    if "adaptive" in name or "diffq" in name:
        assert "clip_bound" in a.attrs
    if "diffq" in name:
        assert "private quantile" in a.attrs["diff_clip_reason"]


@pytest.fixture(scope="module")
def non_finite_likelihoods(cluster, stan_model):
    model = stan_model("logistic")
    data = _data()
    data["x"][7, 1] = 1e308  # row 7 overflows (non-finite value and gradient) at most points; row 7 is in shard 0
    data["x"][40, 0] = -1e308  # and row 40 in shard 1
    local = model.row_likelihood(data, threads=1, check=False)
    remote = model.row_likelihood(data, backend="ray", ray_workers=WORKERS, check=False)
    yield local, remote
    remote.close()


@pytest.mark.slow
@pytest.mark.parametrize("algorithm,options", [
    ("dp-hmc", dict(ratio_clip=2.0, grad_clip=2.0, leapfrog_steps=3, anchor="none")),  # per-row gradients to the driver's clip
    ("dp-sgld", dict(grad_clip=2.0, anchor="dp-gd", anchor_steps=6)),  # clipped sums on the actors
])
def test_runs_with_non_finite_rows_equal_the_local_engine(non_finite_likelihoods, algorithm, options):
    """Two rows whose log-likelihood and gradient are not finite: the Ray run's draws equal the local engine's."""
    local, remote = non_finite_likelihoods
    theta = np.array([0.1, 0.2, 5.0, -0.3])
    values, _ = local.row_log_lik_grad(theta)
    assert not np.isfinite(values[[7, 40]]).all()  # the rows really fail
    a, _ = _same_draws(local, remote, algorithm, options)
    assert all(np.isfinite(np.asarray(a.posterior[v].values)).all() for v in a.posterior.data_vars)


#: the modules whose code an actor runs on rows: its own class, the engine, the clip, the anchor rule
ACTOR_MODULES = ("stan_dp/stan/ray_rows.py", "stan_dp/stan/engine.py", "stan_dp/privacy/mechanisms.py",
                 "stan_dp/phases/anchor.py", "stan_dp/stan/row_tables.py", "stan_dp/stan/native/shards.cpp")


def test_identity_covers_every_module_an_actor_runs_and_names_what_differs():
    """The code identity holds the version and a SHA-256 of every module and native source of the package (the
    shard worker, the engine, the clip, the anchor rule among them, each equal to its file's hash); a worker that
    differs in any one of them, or in the version, or that has no file to compare, is refused with a message
    naming the version and the files that differ and the fix."""
    import hashlib

    driver = ray_rows.code_identity()
    assert driver["version"] == stan_dp_version()
    package = Path(ray_rows.__file__).resolve().parents[2]
    for name in ACTOR_MODULES:
        assert driver["modules"][name] == hashlib.sha256((package / name).read_bytes()).hexdigest(), name
    every = {p.relative_to(package).as_posix() for p in (package / "stan_dp").rglob("*.py")
             if "__pycache__" not in p.parts}
    assert every <= set(driver["modules"])
    assert ray_rows.identity_mismatch(driver, dict(driver)) is None
    text = ray_rows.identity_mismatch(driver, {**driver, "version": "0.0.1"})
    assert "0.0.1" in text and driver["version"] in text and "Install the driver's stan-dp" in text
    for name in ACTOR_MODULES:
        text = ray_rows.identity_mismatch(driver, {**driver, "modules": {**driver["modules"], name: "f" * 64}})
        assert text is not None and f"other code in {name}" in text, name
    fewer = {k: v for k, v in driver["modules"].items() if k != "stan_dp/phases/anchor.py"}
    assert "stan_dp/phases/anchor.py" in ray_rows.identity_mismatch(driver, {**driver, "modules": fewer})
    assert "no source file" in ray_rows.identity_mismatch({**driver, "modules": {}}, {**driver, "modules": {}})


@pytest.mark.slow
def test_workers_with_other_code_are_refused(cluster, stan_model, monkeypatch):
    """A driver whose engine module differs from the workers' (simulated by changing the driver's identity: the
    workers compute theirs from their own installed files) gets BackendError at start-up naming the file, and no
    actor stays."""
    model = stan_model("logistic")
    real = ray_rows.code_identity()
    changed = {**real, "modules": {**real["modules"], "stan_dp/stan/engine.py": "0" * 64}}
    monkeypatch.setattr(ray_rows, "code_identity", lambda: changed)
    with pytest.raises(BackendError, match="other code in stan_dp/stan/engine.py"):
        model.row_likelihood(_data(n=10), backend="ray", ray_workers=WORKERS)


def stan_dp_version() -> str:
    from stan_dp._version import __version__

    return __version__


@pytest.mark.slow
def test_a_subclass_override_of_the_row_gradients_is_honoured(likelihoods):
    """A subclass of the row likelihood that overrides row_log_lik_grad: the Ray backend does not use the actors'
    clipped sums of the base gradients (they would lose the override): the clipped sum and a DP-SGLD run equal the
    local engine's with the same override."""
    from stan_dp.privacy import mechanisms

    _, _, local, remote = likelihoods

    class Shifted(StanRowLikelihood):
        def row_log_lik_grad(self, theta, rows=None):
            values, grads = super().row_log_lik_grad(theta, rows)
            return values, grads + 1.0

    def shifted(base):
        out = object.__new__(Shifted)
        out.__dict__.update(base.__dict__)
        return out

    a, b = shifted(local), shifted(remote)
    assert b.partial_clipped_gradient_sums is None and remote.partial_clipped_gradient_sums is not None
    rng = np.random.default_rng(8)
    theta, rows = rng.normal(size=remote.dim), rng.integers(0, 61, size=50)
    expected = remote.row_log_lik_grad(theta, rows)[1].sum(axis=0) + 50.0
    np.testing.assert_allclose(mechanisms.rows_clipped_gradient_sum(b, theta, rows, 1e6), expected, rtol=1e-12)
    _same_draws(a, b, "dp-sgld", dict(grad_clip=2.0))


def test_clipped_gradient_sums_are_summed_where_the_rows_live(likelihoods):
    """The SG kernels and DP-GD get their clipped sums from the actors (one vector per shard on the wire); the
    sum equals the local one up to the order of the additions."""
    from stan_dp.privacy import mechanisms

    _, _, local, remote = likelihoods
    assert local.partial_clipped_gradient_sums is None and remote.partial_clipped_gradient_sums is not None
    rng = np.random.default_rng(8)
    theta, rows = rng.normal(size=remote.dim), rng.integers(0, 61, size=50)
    a = mechanisms.rows_clipped_gradient_sum(local, theta, rows, 0.3)
    b = mechanisms.rows_clipped_gradient_sum(remote, theta, rows, 0.3)
    np.testing.assert_allclose(b, a, rtol=1e-14, atol=1e-14)
    assert np.array_equal(mechanisms.rows_clipped_gradient_sum(remote, theta, rows[:0], 0.3), np.zeros(remote.dim))

    class Wrapper:  # a wrapper that delegates by __getattr__ (as the anchored rows do) gets no partial sums
        def __init__(self, base):
            self._base = base

        def __getattr__(self, name):
            return getattr(self._base, name)

        def row_log_lik_grad(self, theta, rows):
            values, grads = self._base.row_log_lik_grad(theta, rows)
            return values, grads + 1.0

    shifted = mechanisms.rows_clipped_gradient_sum(Wrapper(remote), theta, rows, 1e6)
    np.testing.assert_allclose(shifted, remote.row_log_lik_grad(theta, rows)[1].sum(axis=0) + 50.0, rtol=1e-12)


def test_anchored_rows_are_summed_where_the_rows_live(likelihoods):
    """An anchored run's rows on the Ray backend: each actor keeps its rows' anchor gradients (recomputed from the
    released theta_hat by the driver's rule, a row not finite there giving 0) and returns only its clipped sum of
    g_i(theta) - a_i; the sum equals the local anchored rows' up to the order of the additions. Local rows keep
    the anchor on the caller's side (no partial sums)."""
    from stan_dp.privacy import mechanisms
    from stan_dp.phases.anchor import AnchoredLikelihood, anchor_row_gradients

    _, _, local, remote = likelihoods
    rng = np.random.default_rng(5)
    theta_hat, theta = rng.normal(size=remote.dim), rng.normal(size=remote.dim)
    grads = anchor_row_gradients(local.row_log_lik_grad(theta_hat)[1].copy())
    gradient = rng.normal(size=remote.dim)
    a = AnchoredLikelihood(local, grads, gradient, theta_hat=theta_hat)
    b = AnchoredLikelihood(remote, grads, gradient, theta_hat=theta_hat)
    assert a.partial_clipped_gradient_sums is None and b.partial_clipped_gradient_sums is not None
    rows = rng.integers(0, 61, size=50)  # both shards, repeats, no order
    for bound in (0.3, 1e6):
        expected = mechanisms.rows_clipped_gradient_sum(a, theta, rows, bound)
        np.testing.assert_allclose(mechanisms.rows_clipped_gradient_sum(b, theta, rows, bound), expected,
                                   rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(mechanisms.rows_clipped_gradient_sum(b, theta, None, 1e6),
                               (local.row_log_lik_grad(theta)[1] - grads).sum(axis=0), rtol=1e-12, atol=1e-12)


def test_the_anchor_statistics_are_formed_where_the_rows_live(likelihoods, monkeypatch):
    """The anchor phase's statistics at theta_hat on the Ray backend (the clipped gradient sum, the count within the
    bound, the clipped squared-gradient sum) are formed by the actors, which keep the same gradients as their anchor
    gradients: equal to the local statistics up to the order of the additions, no per-row gradient on the driver,
    and the anchored rows built afterwards do not recompute them. A whole anchored SG run then never asks the
    actors for the gradients of all rows (those would cross the wire to the driver)."""
    from stan_dp.privacy import mechanisms
    from stan_dp.phases.anchor import AnchoredLikelihood, anchor_statistics

    _, _, local, remote = likelihoods
    theta_hat = np.random.default_rng(8).normal(size=remote.dim)
    for bound in (0.4, 1e6):
        a, grads_a = anchor_statistics(local, theta_hat, bound, count=True, squared=True)
        b, grads_b = anchor_statistics(remote, theta_hat, bound, count=True, squared=True)
        assert grads_a is not None and grads_b is None
        np.testing.assert_allclose(b.gradient, a.gradient, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(b.squared, a.squared, rtol=1e-13, atol=1e-13)
        assert a.inside == b.inside and (bound > 1 or 0 < a.inside < 61)
    calls = []
    real = ray_rows.RayShardRows._gather
    monkeypatch.setattr(ray_rows.RayShardRows, "_gather",
                        lambda self, refs, what, *rest: calls.append(what) or real(self, refs, what, *rest))
    kept = [ray.get(actor.anchor_theta.remote()) for actor in remote._rows._actors]
    assert all(np.array_equal(k, theta_hat) for k in kept)
    lik = AnchoredLikelihood(remote, None, a.gradient, theta_hat=theta_hat)
    assert "keeping the anchor gradients" not in calls  # the actors already keep them: nothing recomputed
    np.testing.assert_allclose(mechanisms.rows_clipped_gradient_sum(lik, theta_hat + 0.1, None, 1e6),
                               (local.row_log_lik_grad(theta_hat + 0.1)[1]
                                - local.row_log_lik_grad(theta_hat)[1]).sum(axis=0), rtol=1e-12, atol=1e-12)

    def no_whole_fetch(self, theta, rows=None):
        raise AssertionError("the driver asked for the gradients of all rows")

    monkeypatch.setattr(ray_rows.RayShardRows, "log_lik_grad", no_whole_fetch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sample_private(remote, algorithm="dp-sgld", grad_clip=2.0, anchor="dp-gd", anchor_steps=4, epsilon=2.0,
                             delta=1e-4, chains=2, iter_warmup=4, iter_sampling=4, seed=3, show_progress=False)
    assert "anchor_gradient" in fit.attrs


def test_a_shard_actor_keeps_only_the_factorization_checks_rows(stan_model):
    """An actor built from its rows sent in pieces (``row_chunks``, one piece in Ray's object store at a time)
    evaluates them as the local engine does; its factorization check runs on a bounded range of its shard's rows
    (as the local engine's: across the first boundary of its native shards), and the actor keeps a copy of those
    rows only, not the shard's rows as sent."""
    from stan_dp.stan.data import split_rows
    from stan_dp.stan.factorization import CHECK_ROWS

    model = stan_model("logistic")
    data = _data(n=CHECK_ROWS + 5000)
    split, kept = split_rows(model.data_declarations, data, rows="N")
    worker = ray_rows.ShardWorker(ray_rows.code_identity())
    # the rows arrive in pieces (as the driver sends them, here of 1,000 rows), the public data with the build
    row_bytes = 3 * 8 + 8  # x: 3 reals, y: an int
    pieces = list(ray_rows.row_chunks(kept, split, 0, split.n_rows, chunk_bytes=1000 * row_bytes))
    assert len(pieces) == 14 and [o for o, _ in pieces][:3] == [0, 1000, 2000] and len(pieces[-1][1]["y"]) == 192
    for offset, piece in pieces:
        worker.receive_rows(piece, offset, split.n_rows)
    public = {name: kept[name] for name in ("N", *split.public_variables)}
    assert worker.load(str(model.library_path), public, split, "shard", 2, False) == (CHECK_ROWS + 5000, 4)
    theta = np.array([0.3, -0.2, 0.5, 0.1])
    np.testing.assert_array_equal(worker.log_lik(theta, None), model.row_likelihood(data, threads=1,
                                                                                    check=False).row_log_lik(theta))
    first = worker._check_rows.start
    assert len(worker._check_rows) == CHECK_ROWS and 0 < first < (CHECK_ROWS + 5000) // 2 < worker._check_rows.stop
    assert worker._check_data["N"] == CHECK_ROWS and not hasattr(worker, "_data")
    np.testing.assert_array_equal(worker._check_data["x"], data["x"][first:first + CHECK_ROWS])
    assert not np.shares_memory(worker._check_data["x"], kept["x"])
    assert worker.check_factorization(2) is True


def test_a_shard_actor_sums_all_rows_in_blocks_and_recomputes_its_anchor_gradients(stan_model, monkeypatch):
    """An actor evaluates "all rows" block by block (here blocks of 1,000 of its 3,500 rows, the last partial) and
    anchors its rows by the released point and rule only: its full-batch sums, its statistics at the anchor and
    its anchored sums (all rows, and a minibatch) equal those formed from the whole gradient matrix at once, and it
    holds no per-row array of anchor gradients (non-finite anchor gradients: the run-level test above)."""
    from stan_dp.privacy import mechanisms
    from stan_dp.phases.anchor import anchor_row_gradients
    from stan_dp.stan.data import split_rows

    monkeypatch.setattr(ray_rows, "ALL_ROWS_BLOCK", 1000)
    model = stan_model("logistic")
    data = _data(n=3500, seed=11)
    split, kept = split_rows(model.data_declarations, data, rows="N")
    worker = ray_rows.ShardWorker(ray_rows.code_identity())
    for offset, piece in ray_rows.row_chunks(kept, split, 0, split.n_rows):
        worker.receive_rows(piece, offset, split.n_rows)
    public = {name: kept[name] for name in ("N", *split.public_variables)}
    worker.load(str(model.library_path), public, split, "shard", 1, False)
    assert [len(b) for b in worker._blocks()] == [1000, 1000, 1000, 500]
    local = model.row_likelihood(data, threads=1, check=False)
    theta_hat, theta = np.array([0.3, -0.2, 0.5, 0.1]), np.array([0.1, 0.4, -0.3, 0.2])
    at_anchor = np.asarray(local.row_log_lik_grad(theta_hat)[1], dtype=float).reshape(3500, 4)
    at_theta = np.asarray(local.row_log_lik_grad(theta)[1], dtype=float).reshape(3500, 4)
    bound = 0.8
    np.testing.assert_allclose(worker.clipped_gradient_sum(theta, None, bound, mechanisms.clipped_gradient_sum),
                               mechanisms.clipped_gradient_sum(at_theta, bound), rtol=1e-13, atol=1e-13)

    part = worker.anchor_sums(theta_hat, bound, mechanisms.anchor_sums, anchor_row_gradients, True, True)
    whole = mechanisms.anchor_sums(at_anchor, bound, count=True, squared=True)
    np.testing.assert_allclose(part.gradient, whole.gradient, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(part.squared, whole.squared, rtol=1e-13, atol=1e-13)
    assert part.inside == whole.inside
    np.testing.assert_array_equal(worker.anchor_theta(), theta_hat)
    assert not any(isinstance(v, np.ndarray) and v.shape[:1] == (3500,) for v in vars(worker).values())
    differences = at_theta - anchor_row_gradients(at_anchor.copy())
    np.testing.assert_allclose(worker.clipped_gradient_sum(theta, None, bound, mechanisms.clipped_gradient_sum, True),
                               mechanisms.clipped_gradient_sum(differences, bound), rtol=1e-13, atol=1e-13)
    rows = np.array([3, 2000, 2999, 7, 3400])
    np.testing.assert_allclose(worker.clipped_gradient_sum(theta, rows, bound, mechanisms.clipped_gradient_sum, True),
                               mechanisms.clipped_gradient_sum(differences[rows], bound), rtol=1e-13, atol=1e-13)


def test_an_anchored_privacy_unit_is_not_clipped_row_by_row_on_the_actors(likelihoods):
    """A privacy unit over rows on Ray, anchored: the actors must not subtract and clip row by row (a unit's rows
    are summed first, then clipped), so the anchored unit likelihood offers no per-shard sums, even though the
    unit wrapper hands other attributes to its base; its clipped sum equals the local one, unit by unit."""
    from stan_dp.likelihood import KeepsAnchor, PartialGradientSums, offers
    from stan_dp.privacy import mechanisms
    from stan_dp.privacy.units import UnitLikelihood
    from stan_dp.phases.anchor import AnchoredLikelihood, anchor_row_gradients

    _, _, local, remote = likelihoods
    labels = np.arange(61) // 3  # 21 units of up to 3 rows
    units = [UnitLikelihood(base, labels, name="person") for base in (local, remote)]
    rng = np.random.default_rng(6)
    theta_hat, theta = rng.normal(size=remote.dim), rng.normal(size=remote.dim)
    grads = anchor_row_gradients(units[0].row_log_lik_grad(theta_hat)[1].copy())
    gradient = rng.normal(size=remote.dim)
    a, b = (AnchoredLikelihood(u, grads, gradient, theta_hat=theta_hat) for u in units)
    assert a.partial_clipped_gradient_sums is None and b.partial_clipped_gradient_sums is None
    assert not any(offers(u, PartialGradientSums) or offers(u, KeepsAnchor) for u in units)
    rows = np.sort(rng.choice(21, size=12, replace=False))
    np.testing.assert_allclose(mechanisms.rows_clipped_gradient_sum(b, theta, rows, 0.3),
                               mechanisms.rows_clipped_gradient_sum(a, theta, rows, 0.3), rtol=1e-13, atol=1e-13)


def test_a_non_finite_row_gives_the_same_value_on_both_backends(cluster, stan_model):
    model = stan_model("logistic")
    data = _data(n=10)
    data["x"][7, 1] = 1e308  # overflows the linear predictor of row 7 at most points
    local = model.row_likelihood(data, threads=1, check=False)
    remote = model.row_likelihood(data, backend="ray", ray_workers=WORKERS, check=False)
    try:
        theta = np.array([0.1, 0.2, 5.0, -0.3])
        values, grads = remote.row_log_lik_grad(theta)
        ref_values, ref_grads = local.row_log_lik_grad(theta)
        np.testing.assert_array_equal(values, ref_values)
        np.testing.assert_array_equal(grads, ref_grads)
        with pytest.raises(NativeError, match="out of range") as info:
            remote.row_log_lik(theta, np.array([3, 10]))
        assert "1e+308" not in str(info.value)
    finally:
        remote.close()


def test_an_address_given_to_a_connected_process_is_named_unused(cluster, stan_model):
    """A process already connected to Ray keeps that connection; a given ray_address draws a warning saying so."""
    model = stan_model("logistic")
    with pytest.warns(UserWarning, match="ray_address='auto' is not used"):
        remote = model.row_likelihood(_data(n=10), backend="ray", ray_workers=WORKERS, ray_address="auto")
    remote.close()


@pytest.mark.slow
def test_a_killed_actor_stops_the_run_with_the_partial_fit(cluster, stan_model, monkeypatch):
    model = stan_model("logistic")
    calls = {"n": 0}
    real = ray_rows.RayShardRows.partial_clipped_gradient_sums  # DP-SGLD's one row call per step

    def killing(self, *args):
        calls["n"] += 1
        if calls["n"] == 25:  # mid-run: the second shard's worker process dies
            os.kill(self.actor_pids()[1], signal.SIGKILL)
        return real(self, *args)

    monkeypatch.setattr(ray_rows.RayShardRows, "partial_clipped_gradient_sums", killing)
    with pytest.raises(BackendError) as info, pytest.warns():
        model.sample(_data(), algorithm="dp-sgld", epsilon=2.0, delta=1e-4, chains=1, iter_warmup=20,
                     iter_sampling=20, seed=5, show_progress=False, grad_clip=2.0, backend="ray",
                     ray_workers=WORKERS)
    message = str(info.value)
    assert "lost a worker" in message and "NEW budget" in message and "covered by the privacy budget" in message
    fit = info.value.partial_fit
    assert fit is not None and int(fit.attrs["interrupted"]) == 1
    drawn = fit.posterior.sizes["draw"]
    assert 0 < drawn < 20
    assert fit.attrs["epsilon_spent"] < 2.0  # the report covers the iterations that completed only


@pytest.mark.slow
def test_a_killed_actor_with_a_checkpoint_resumes_to_the_uninterrupted_draws(likelihoods, monkeypatch, tmp_path):
    """A checkpointed Ray run whose actor is killed mid-run stops with BackendError naming the checkpoint and
    carrying the partial fit, and checkpoints exactly the iterations that fit publishes (the failed iteration is not
    among them); stan_dp.resume continues it (here on the local engine, which the state does not tie to a backend)
    and gives the uninterrupted run's draws (equal across backends to 1e-12) and its epsilon."""
    from stan_dp.phases.checkpoint import load_checkpoint

    model, data, local, _ = likelihoods
    run = dict(algorithm="dp-sgld", epsilon=2.0, delta=1e-4, chains=1, iter_warmup=20, iter_sampling=20, seed=5,
               show_progress=False, grad_clip=2.0)
    with pytest.warns():
        full = sample_private(local, **run)
    run.update(backend="ray", ray_workers=WORKERS)
    calls = {"n": 0}
    real = ray_rows.RayShardRows.partial_clipped_gradient_sums

    def killing(self, *args):
        calls["n"] += 1
        if calls["n"] == 25:
            os.kill(self.actor_pids()[1], signal.SIGKILL)
        return real(self, *args)

    monkeypatch.setattr(ray_rows.RayShardRows, "partial_clipped_gradient_sums", killing)
    with pytest.raises(BackendError) as info, pytest.warns():
        model.sample(_data(), checkpoint=tmp_path / "ck", checkpoint_every=5, **run)
    monkeypatch.setattr(ray_rows.RayShardRows, "partial_clipped_gradient_sums", real)
    assert "stan_dp.resume" in str(info.value) and "no new spend" in str(info.value)
    published = json.loads(info.value.partial_fit.attrs["iterations_per_chain"])
    assert load_checkpoint(tmp_path / "ck").chain_done == published and 0 < published[0] < 40
    with pytest.warns():
        fit = stan_dp.resume(tmp_path / "ck", data=_data(), show_progress=False, backend="local")
    np.testing.assert_allclose(fit.posterior["beta"].values, full.posterior["beta"].values, rtol=0, atol=1e-12)
    assert fit.attrs["epsilon_spent"] == full.attrs["epsilon_spent"] and int(fit.attrs["resumed"]) == 1


def test_missing_ray_and_bad_backend_names_are_clear(monkeypatch, stan_model):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'stan-dp\[ray\]'"):
        ray_rows.require_ray()
    with pytest.raises(ValueError, match="backend must be one of 'local', 'ray'"):
        stan_model("logistic").sample(_data(), epsilon=1.0, delta=1e-4, backend="dask", grad_clip=2.5)


@pytest.mark.slow
def test_cli_backend_ray_writes_the_same_draws(cluster, stan_model, tmp_path):
    import json

    from stan_dp.cli import main
    from stan_dp.output.arviz_compat import from_netcdf

    stan_model("logistic")  # compiled (cached) before the CLI builds it again from the cache
    data = _data(n=40)
    path = tmp_path / "data.json"
    path.write_text(json.dumps({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in data.items()}))
    program = str(ROOT / "stan_models" / "logistic.stan")
    common = [program, "--data", str(path), "--algorithm", "dp-sgld", "--option", "grad_clip=2", "--epsilon", "2",
              "--delta", "1e-4", "--chains", "1", "--iter-warmup", "5", "--iter-sampling", "5", "--seed", "2",
              "--quiet"]
    assert main(["sample", *common, "--output", str(tmp_path / "a.nc")]) == 0
    assert main(["sample", *common, "--output", str(tmp_path / "b.nc"), "--backend", "ray", "--workers", "2"]) == 0
    a, b = from_netcdf(tmp_path / "a.nc"), from_netcdf(tmp_path / "b.nc")
    np.testing.assert_allclose(b.posterior["beta"].values, a.posterior["beta"].values, rtol=0, atol=1e-12)
    assert main(["sample", *common, "--output", str(tmp_path / "c.nc"), "--workers", "2"]) == 2


def test_rows_from_a_parquet_file_are_read_by_the_actors(cluster, stan_model, tmp_path, monkeypatch, capsys):
    """`--row-data rows.parquet --backend ray`: the driver checks the file and each actor reads its own shard from
    it (the driver sends no rows: sending them would fail here), and the draws equal a local run's; a bad value
    in the file stops the run before any actor is built, with exit 2 and the column named."""
    pa = pytest.importorskip("pyarrow", reason="Parquet needs the optional pyarrow (the tables extra)")
    import pyarrow.parquet as pq

    from stan_dp.cli import main
    from stan_dp.output.arviz_compat import from_netcdf

    stan_model("logistic")  # compiled (cached) before the CLI builds it again from the cache
    data = _data(n=45)
    columns = {**{f"x.{j + 1}": data["x"][:, j] for j in range(3)}, "y": data["y"]}
    pq.write_table(pa.table(columns), tmp_path / "rows.parquet", row_group_size=8)
    (tmp_path / "public.json").write_text(json.dumps({"prior_sd": data["prior_sd"]}))
    program = str(ROOT / "stan_models" / "logistic.stan")
    common = [program, "--data", str(tmp_path / "public.json"), "--algorithm", "dp-sgld", "--option", "grad_clip=2",
              "--epsilon", "2", "--delta", "1e-4", "--chains", "1", "--iter-warmup", "5", "--iter-sampling", "5",
              "--seed", "3", "--quiet"]
    rows = ["--row-data", str(tmp_path / "rows.parquet")]
    assert main(["sample", *common, *rows, "--output", str(tmp_path / "a.nc")]) == 0

    def no_shipping(*args, **kwargs):
        raise AssertionError("the driver sent rows that the actors should have read from the file")

    monkeypatch.setattr(ray_rows, "row_chunks", no_shipping)
    assert main(["sample", *common, *rows, "--output", str(tmp_path / "b.nc"), "--backend", "ray",
                 "--workers", "2"]) == 0
    a, b = from_netcdf(tmp_path / "a.nc"), from_netcdf(tmp_path / "b.nc")
    np.testing.assert_allclose(b.posterior["beta"].values, a.posterior["beta"].values, rtol=0, atol=1e-12)
    columns["x.3"] = columns["x.3"].copy()
    columns["x.3"][40] = np.nan  # in the second shard
    pq.write_table(pa.table(columns), tmp_path / "bad.parquet", row_group_size=8)
    capsys.readouterr()
    assert main(["sample", *common, "--row-data", str(tmp_path / "bad.parquet"), "--output",
                 str(tmp_path / "c.nc"), "--backend", "ray", "--workers", "2"]) == 2
    assert "Column 'x.3' has missing or non-finite values" in capsys.readouterr().err
    assert not (tmp_path / "c.nc").exists()


def test_a_local_cluster_the_package_starts_gets_a_small_object_store(monkeypatch):
    """start_ray: with no address and no RAY_ADDRESS the new local cluster's object store is
    LOCAL_OBJECT_STORE_BYTES; when Ray finds a running cluster instead (it refuses the store size) or an address is
    given, Ray is called without one; other errors are not swallowed."""
    calls = []

    class FakeRay:
        def __init__(self, refuse=None):
            self.refuse = refuse

        def init(self, **kwargs):
            calls.append(kwargs)
            if self.refuse is not None and "object_store_memory" in kwargs:
                raise ValueError(self.refuse)

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ray_rows.start_ray(FakeRay(), None)
    assert calls[-1]["object_store_memory"] == ray_rows.LOCAL_OBJECT_STORE_BYTES and len(calls) == 1
    ray_rows.start_ray(FakeRay("When connecting to an existing cluster, object_store_memory must not be provided."),
                       None)
    assert "object_store_memory" not in calls[-1] and calls[-1]["address"] is None and len(calls) == 3
    ray_rows.start_ray(FakeRay(), "auto")
    assert calls[-1]["address"] == "auto" and "object_store_memory" not in calls[-1]
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    ray_rows.start_ray(FakeRay(), None)
    assert "object_store_memory" not in calls[-1]
    monkeypatch.delenv("RAY_ADDRESS")
    with pytest.raises(ValueError, match="something else"):
        ray_rows.start_ray(FakeRay("something else"), None)
