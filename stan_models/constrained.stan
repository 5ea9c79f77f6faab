// Parameters of several constrained kinds, for testing the BridgeStan API (no row structure needed).
data {
  int<lower=0> N;
  int<lower=2> K;
  array[N] vector[K] z;
}
parameters {
  real<lower=0> scale;
  real<lower=-1, upper=2> bounded;
  simplex[K] weights;
  cholesky_factor_corr[K] L;
  cov_matrix[2] Sigma;
  vector<lower=0>[2] tau;
}
model {
  scale ~ lognormal(0, 1);
  weights ~ dirichlet(rep_vector(2, K));
  L ~ lkj_corr_cholesky(2);
  Sigma ~ wishart(4, diag_matrix(rep_vector(1, 2)));
  tau ~ exponential(1);
  z ~ multi_normal_cholesky(rep_vector(0, K), diag_pre_multiply(rep_vector(scale, K), L));
}
