"""Stan: Stan programs and their data -> row likelihoods (the compiled-model side; never private by itself).

Takes: a Stan program, its data (rows and public data), public inits.
Gives: a cached shared library, the row likelihood (``engine.StanRowLikelihood``) and the non-private NUTS reference.
"""
