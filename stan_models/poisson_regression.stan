// Poisson regression with a log link (no hierarchy); each row is (x[n], y[n]). Matches
// stan_dp.reference_models.PoissonRegressionModel.
data {
  int<lower=0> N;
  int<lower=1> K;
  matrix[N, K] x;
  array[N] int<lower=0> y;
  real<lower=0> prior_sd;
}
parameters {
  real alpha;
  vector[K] beta;
}
model {
  alpha ~ normal(0, prior_sd);
  beta ~ normal(0, prior_sd);
  y ~ poisson_log(alpha + x * beta);
}
