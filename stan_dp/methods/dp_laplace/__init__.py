"""dp-laplace: a private anchor, then the clipped gradient and curvature released at a few Newton points, and
closed-form draws from the Laplace approximation they give (``laplace``, ``laplace_posterior``)."""
