"""Where the noise of a private run comes from: one ``numpy.random.Generator`` per chain.

* Unseeded runs (the private default) draw from **ChaCha20** (``randomgen.ChaCha`` with 20 rounds, the
  stream cipher of RFC 8439 used as a counter-mode generator) keyed with 256 fresh bits from the operating
  system's cryptographic source (``secrets``) for every chain. An observer who sees any amount of output
  cannot predict or reconstruct other output, which a statistical generator such as PCG64 does not promise.
* Seeded runs use NumPy's PCG64 through ``numpy.random.SeedSequence(seed).spawn(chains)``, exactly as before:
  they are reproducible, and their noise is reproducible by anyone who knows the seed anyway (the attrs say
  so), so a cryptographic generator would add nothing there.

Both plug into ``numpy.random.Generator``, so every kernel draws its normals, uniforms, exponentials and
Poisson variates through the same methods either way. The cost of ChaCha20 per kernel step is measured by
``benchmarks/bench_noise_source.py``.
"""
from __future__ import annotations

import secrets

import numpy as np
from randomgen import ChaCha

__all__ = ["SECURE_GENERATOR", "secure_generator", "chain_generators", "phase_seed_sequence"]

#: name of the bit generator used for unseeded runs (recorded in the attrs as ``noise_source``)
SECURE_GENERATOR = "ChaCha20 (randomgen), 256-bit key from the OS cryptographic source"
SEEDED_GENERATOR = "PCG64 (numpy), from SeedSequence(seed)"


def secure_generator() -> np.random.Generator:
    """A Generator on ChaCha20 keyed with 256 bits from ``secrets`` (the OS cryptographic source)."""
    return np.random.Generator(ChaCha(key=secrets.randbits(256), rounds=20))


def chain_generators(seed_sequence: np.random.SeedSequence | None, chains: int) -> list[np.random.Generator]:
    """One independent Generator per chain: ChaCha20 with fresh OS keys when ``seed_sequence`` is None,
    otherwise PCG64 on the children of ``seed_sequence`` (reproducible)."""
    if seed_sequence is None:
        return [secure_generator() for _ in range(chains)]
    return [np.random.default_rng(child) for child in seed_sequence.spawn(chains)]


def describe(seeded: bool) -> str:
    """The bit generator a run used, for the attrs."""
    return SEEDED_GENERATOR if seeded else SECURE_GENERATOR


def phase_seed_sequence(seed, tag: int) -> np.random.SeedSequence | None:
    """The seed sequence of a run phase before the chains (a warm start, the anchor): None for an unseeded run
    (secure generators), else a sequence disjoint from the chains' (``run_chains`` uses the children
    0 .. chains - 1 of ``SeedSequence(seed)``) and from other phases' (a distinct ``tag``)."""
    if seed is None:
        return None
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return np.random.SeedSequence(entropy=seq.entropy, spawn_key=tuple(seq.spawn_key) + (int(tag),))
