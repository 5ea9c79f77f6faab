"""dp-glm: a logistic or Poisson regression's score and curvature released at Newton points and at an anchor
(``glm_release``), the noise-aware Stan program sampled to convergence (``glm_posterior``) and the price in advance
of a gradient-bounded regression (``glm_price``)."""
