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

One stream per purpose (``stream`` / ``streams``). A run draws randomness for different purposes: the noise of
the mechanisms (with the randomness a mechanism keeps secret, such as minibatches), the kernels' own public
randomness (proposals, momenta, accept draws: an accepted proposal is a released draw), the public starts of the
chains and of the phases, the noise-aware shifts of an anchored run, the public probe points of the difference
quantile and dp-laplace's draws. Released values drawn from public randomness (proposals, starts, shifts, draws)
never come from the generator that draws a mechanism's noise: every purpose, and every phase within it, has its
own generator. For a seeded run
each is a child of ``SeedSequence(seed)`` at a fixed spawn key (the purpose's key, then the phase's key), so
the streams are reproducible, independent of each other and unchanged when another purpose draws more or
fewer numbers (public inits given instead of drawn leave every mechanism's noise as it was). For an unseeded
run every stream is a fresh ChaCha20 generator.
"""
from __future__ import annotations

import secrets
from typing import Any

import hashlib

import numpy as np
from randomgen import ChaCha

__all__ = ["SECURE_GENERATOR", "PURPOSES", "secure_generator", "chain_generators", "phase_seed_sequence",
           "stream", "streams", "purpose_seed_sequence", "generator_state", "restore_generator"]

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


def phase_seed_sequence(seed: int | np.random.SeedSequence | None, tag: int) -> np.random.SeedSequence | None:
    """The seed sequence of a run phase before the chains (a warm start, the anchor): None for an unseeded run
    (secure generators), else a sequence disjoint from the chains' (``run_chains`` uses the children
    0 .. chains - 1 of ``SeedSequence(seed)``) and from other phases' (a distinct ``tag``)."""
    if seed is None:
        return None
    seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return np.random.SeedSequence(entropy=seq.entropy, spawn_key=tuple(seq.spawn_key) + (int(tag),))


#: the purposes a run draws randomness for, each with its fixed spawn-key entry (never change a key: seeded draws
#: depend on it). "mechanism noise" is a kernel's or a phase's generator for the mechanisms' noise and the
#: randomness a mechanism keeps secret (minibatches, DP-Fast MH's Batch()); "proposals" is a chain kernel's public
#: randomness (proposals, momenta, step jitter, accept uniforms, DP-Fast MH's batch count B), whose results are
#: released or nearly; the others are public randomness whose results may be released.
PURPOSES: dict[str, int] = {
    "mechanism noise": 0x4E4F4953,
    "proposals": 0x50524F50,
    "chain starts": 0x53544152,
    "noise-aware shifts": 0x53484946,
    "probe points": 0x50524F42,
    "posterior draws": 0x44524157,
}

#: the phases of a run, each with its fixed spawn-key entry (within a purpose)
PHASES: dict[str, int] = {
    "chains": 0x43484149,
    "warm start": 0x5741524D,
    "anchor": 0x414E4348,
    "dp-laplace": 0x4C415031,
    "dp-ssp": 0x53535031,
    "dp-glm": 0x474C4D31,
}


def register_phase(name: str) -> int:
    """The spawn-key entry of the run phase ``name``, added when new (a method registered later draws its noise in a
    phase of its own name): the first four bytes of the SHA-256 of the name, refused if another phase has it."""
    if name in PHASES:
        return PHASES[name]
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")
    if key in PHASES.values():
        raise ValueError(f"the run phase {name!r} would share a random stream with another phase; rename it")
    PHASES[name] = key
    return key


def _base_sequence(seed: Any) -> np.random.SeedSequence:
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be a non-negative int, a numpy SeedSequence or None; got {seed!r}.")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}.")
    return np.random.SeedSequence(int(seed))


def purpose_seed_sequence(seed: Any, purpose: str, phase: str) -> np.random.SeedSequence | None:
    """The seed sequence of one (purpose, phase) stream: None for an unseeded run (``seed`` None), else the child
    of ``SeedSequence(seed)`` (or of the given sequence) at spawn key (..., purpose key, phase key). Unknown names
    raise ``KeyError`` (a typo must not silently share another stream)."""
    if purpose not in PURPOSES:
        raise KeyError(f"unknown random-stream purpose {purpose!r}; known: {', '.join(PURPOSES)}")
    if phase not in PHASES:
        raise KeyError(f"unknown run phase {phase!r}; known: {', '.join(PHASES)}")
    if seed is None:
        return None
    seq = _base_sequence(seed)
    return np.random.SeedSequence(entropy=seq.entropy,
                                  spawn_key=tuple(seq.spawn_key) + (PURPOSES[purpose], PHASES[phase]))


def streams(seed: Any, purpose: str, phase: str, count: int) -> list[np.random.Generator]:
    """``count`` independent generators (one per chain) for ``purpose`` in ``phase``: fresh ChaCha20 generators
    when ``seed`` is None, else PCG64 on the children of ``purpose_seed_sequence(seed, purpose, phase)``."""
    return chain_generators(purpose_seed_sequence(seed, purpose, phase), int(count))


def stream(seed: Any, purpose: str, phase: str) -> np.random.Generator:
    """One generator for ``purpose`` in ``phase`` (``streams(seed, purpose, phase, 1)[0]``)."""
    return streams(seed, purpose, phase, 1)[0]


#: the bit generators whose state a checkpoint can hold, by the name their ``state`` dict carries
_BIT_GENERATORS: dict[str, Any] = {"PCG64": np.random.PCG64, "randomgen.chacha.ChaCha": ChaCha}


def generator_state(rng: np.random.Generator) -> dict[str, Any]:
    """The full state of ``rng``'s bit generator (``bit_generator.state``), copied. It is PRIVATE: whoever holds it
    can predict every later draw of the generator, i.e. the noise still to be added. ``TypeError`` for a bit
    generator other than the two the package uses (PCG64 for seeded runs, ChaCha20 for unseeded ones)."""
    state = rng.bit_generator.state
    if state.get("bit_generator") not in _BIT_GENERATORS:
        raise TypeError(f"cannot store the state of a {state.get('bit_generator')!r} generator; the package's "
                        f"streams use {', '.join(_BIT_GENERATORS)}")
    return _copy_state(state)


def restore_generator(state: dict[str, Any]) -> np.random.Generator:
    """A Generator whose next draws are exactly those of the generator ``state`` was taken from
    (``generator_state``)."""
    name = state.get("bit_generator")
    if name not in _BIT_GENERATORS:
        raise ValueError(f"unknown bit generator {name!r} in a stored generator state")
    bit_generator = np.random.PCG64(0) if name == "PCG64" else ChaCha(key=0, rounds=20)
    bit_generator.state = _copy_state(state)
    return np.random.Generator(bit_generator)


def _copy_state(state: Any) -> Any:
    if isinstance(state, dict):
        return {key: _copy_state(value) for key, value in state.items()}
    if isinstance(state, np.ndarray):
        return state.copy()
    return state
