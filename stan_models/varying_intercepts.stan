// Normal outcomes with a varying intercept per group (a two-level model): a[j] ~ normal(mu, tau). The centred
// form suits groups that each hold many rows (the rows pin every a[j] down); the number of groups J is public and
// every parameter is sized by J, none by the row count N.
data {
  int<lower=0> N;                          // rows
  int<lower=1> J;                          // groups (public)
  array[N] int<lower=1, upper=J> group;    // each row's group
  vector[N] y;                             // each row's outcome
  real<lower=0> prior_sd;                  // prior scale of mu, tau and sigma
}
parameters {
  real mu;
  real<lower=0> tau;
  vector[J] a;
  real<lower=0> sigma;
}
model {
  mu ~ normal(0, prior_sd);
  tau ~ normal(0, prior_sd);
  a ~ normal(mu, tau);
  sigma ~ normal(0, prior_sd);
  y ~ normal(a[group], sigma);
}
