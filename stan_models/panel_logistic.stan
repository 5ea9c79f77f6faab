// Logistic regression on a panel: rows are person-years, y[n] is a yes/no outcome of row n, x[n] its
// covariates. person[n] labels the person a row belongs to; the model does not use it (it is the privacy unit).
data {
  int<lower=0> N;
  int<lower=1> K;
  matrix<lower=-1, upper=1>[N, K] x;  // every covariate on a public scale in [-1, 1] (or 0/1)
  array[N] int<lower=0, upper=1> y;
  array[N] int<lower=1> person;
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
