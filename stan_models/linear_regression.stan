// Normal linear regression with weakly informative priors; each row is (x[n], y[n]).
data {
  int<lower=0> N;
  int<lower=1> K;
  matrix[N, K] x;
  vector[N] y;
  real<lower=0> prior_sd;
}
parameters {
  real alpha;
  vector[K] beta;
  real<lower=0> sigma;
}
model {
  alpha ~ normal(0, prior_sd);
  beta ~ normal(0, prior_sd);
  sigma ~ normal(0, prior_sd);
  y ~ normal(alpha + x * beta, sigma);
}
