"""BLAS thread limiting inside multi-chain runs (stan_dp.phases.threads)."""
import pytest
from threadpoolctl import threadpool_info

from stan_dp.phases.threads import blas_threads_per_chain, limited_blas_threads


def test_threads_per_chain_divides_cores():
    assert blas_threads_per_chain(4, cores=8) == 2
    assert blas_threads_per_chain(4, cores=2) == 1
    assert blas_threads_per_chain(1, cores=3) == 3
    with pytest.raises(ValueError, match="chains"):
        blas_threads_per_chain(0, cores=2)


def test_limit_applies_inside_and_restores_after():
    before = [p["num_threads"] for p in threadpool_info()]
    with limited_blas_threads(64, cores=2) as limit:
        assert limit == 1
        assert all(p["num_threads"] == 1 for p in threadpool_info())
    assert [p["num_threads"] for p in threadpool_info()] == before


def test_sample_private_runs_under_the_limit(monkeypatch):
    """sample_private wraps run_chains in the limit: BLAS pools report 1 thread while chains run."""
    import stan_dp.methods.kernels.kernel_run as kernel_run
    import stan_dp.run.pipeline as sampling
    from stan_dp.models.reference_models import GaussianMeanModel

    seen = []
    real = kernel_run.run_chains

    def spy(*args, **kwargs):
        seen.append([p["num_threads"] for p in threadpool_info()])
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel_run, "run_chains", spy)
    monkeypatch.setattr("stan_dp.phases.threads.os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    model = GaussianMeanModel.simulate(n=200, dim=2, seed=1)
    sampling.sample_private(model, algorithm="penalty", ratio_clip=1.0, epsilon=10.0, delta=1e-5, chains=4,
                            iter_warmup=20,
                            iter_sampling=10, seed=3, show_progress=False)
    assert seen and all(n == 1 for n in seen[0])
