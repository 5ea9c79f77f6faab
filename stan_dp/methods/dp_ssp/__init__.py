"""dp-ssp: a normal linear regression's moment matrix released once (``ssp``), its design prior (``ssp_design``) and
the noise-aware Stan program sampled to convergence (``ssp_program``)."""
