// Räisä et al.'s Gaussian model: each row x[n] ~ N_d(theta, Sigma) with a known (public) covariance Sigma, and
// theta ~ N(prior_mean, prior_sd^2 I). Matches stan_dp.reference_models.GaussianMeanModel.
data {
  int<lower=0> N;
  int<lower=1> d;
  array[N] vector[d] x;
  cov_matrix[d] Sigma;
  vector[d] prior_mean;
  real<lower=0> prior_sd;
}
transformed data {
  matrix[d, d] L = cholesky_decompose(Sigma);
}
parameters {
  vector[d] theta;
}
model {
  theta ~ normal(prior_mean, prior_sd);
  x ~ multi_normal_cholesky(theta, L);
}
