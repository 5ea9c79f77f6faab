"""Privacy machinery of stan-dp.

``accounting``: budget <-> noise for whole runs (dp-accounting PLD, closed form of the DP-HMC paper Theorem 2.4,
RDP cross-check) and the privacy report stored in InferenceData attrs; generic over the DpEvents that
``events`` describes (what one kernel iteration releases, declared by each kernel).
``mechanisms``: the clip / noise / penalty arithmetic the samplers use (imported explicitly where needed).
"""
from stan_dp.privacy.accounting import *  # noqa: F401,F403  (the public names, listed in its __all__)
from stan_dp.privacy.accounting import __all__  # noqa: F401
