"""Phases: the parts a private run is made of, below the methods that combine them.

Takes: a row likelihood and the public settings of one phase (its share of the budget, bounds, lengths).
Gives: the phase's releases (an anchor, chains' starts, draws) and its privacy events for the run's accounting.

The anchor (``anchor``: a private DP-GD anchor and the clipped gradient there), private clip bounds
(``adaptive_clip``), noisy gradient ascent (``dp_gd``), the warm starts (``warm_start``: OPS or DP-GD, and the
hybrid's arguments), the public scale rules (``public_scale``), the noise-aware map of an anchored run's draws
(``noise_aware``), and what every phase shares: the chain loop (``chains``), checkpoints (``checkpoint``), BLAS
thread limits (``threads``) and calibration by kernel name (``calibration``).
"""
