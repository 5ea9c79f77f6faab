"""Models: NumPy reference models with closed forms, for tests, benchmarks and ``advise`` without a compiler.

Takes: public or simulated arrays (rows and public hyper-parameters).
Gives: objects implementing the row-likelihood interface (``stan_dp.likelihood``), and non-private reference draws.
"""
