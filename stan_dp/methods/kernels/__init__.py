"""The kernels as methods: planning a kernel (or hybrid) run from public inputs (``kernel_plan``), its default run
lengths (``run_lengths``), the effective draws an accept-test kernel can reach (``forecast``) and its execution and
publication (``kernel_run``). The kernels themselves are in ``stan_dp.samplers``."""
