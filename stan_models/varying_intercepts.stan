// Normal outcomes with a varying intercept per group (a two-level model): group j's intercept is
// mu + tau * z[j], with z[j] ~ normal(0, 1) (the non-centred form of a[j] ~ normal(mu, tau)). The number of groups
// J is public; every parameter is sized by J, none by the row count N.
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
  vector[J] z;
  real<lower=0> sigma;
}
model {
  mu ~ normal(0, prior_sd);
  tau ~ normal(0, prior_sd);
  z ~ std_normal();
  sigma ~ normal(0, prior_sd);
  y ~ normal(mu + tau * z[group], sigma);
}
