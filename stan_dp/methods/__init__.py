"""Methods: every private method the package runs, one sub-folder each, and the registry that holds them.

Takes: a request's public inputs (``registry.PlanInputs``).
Gives: the method's plan (``method.MethodPlan``), which executes on the rows and publishes its result.

``registry`` holds one entry per name ``sample_private`` takes as ``algorithm``; each method registers itself where
it is defined: ``kernels/`` (the kernels of ``stan_dp.samplers`` and the hybrid: their planning, run lengths,
forecast and execution), ``dp_laplace/``, ``dp_ssp/`` and ``dp_glm/`` (the methods that release statistics a few
times or once, then draw from what they released). ``release_posterior`` is what dp-ssp and dp-glm share: NUTS
rounds on their noise-aware Stan program until it converges. A new method is one module (or folder) that calls
``registry.register``; the docs' design page shows a toy one.
"""
