"""Tools: helpers around private runs that read only public or simulated data (advise, utility scores, the demo).

Takes: public likelihoods or simulated data, a planned budget and public clip bounds.
Gives: expected error per algorithm (``advise``), utility scores of fits, and the ``stan-dp demo`` walk-through.
"""
