// Logistic regression whose covariates declare public bounds: every x[n, k] in [-1, 1], so one row's gradient
// norm is at most sqrt(1 + K) and its curvature at most (1 + K) / 4 (both derived by stan-dp from the program).
data {
  int<lower=0> N;
  int<lower=1> K;
  matrix<lower=-1, upper=1>[N, K] x;
  array[N] int<lower=0, upper=1> y;
  real<lower=0> prior_sd;
}
parameters {
  real alpha;
  vector[K] beta;
}
model {
  alpha ~ normal(0, prior_sd);
  beta ~ normal(0, prior_sd);
  y ~ bernoulli_logit(alpha + x * beta);
}
