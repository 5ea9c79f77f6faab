// Normal outcomes with one offset per group, the offsets constrained to sum to zero.
// sum_to_zero_vector is a constrained type added in Stan 2.36: stanc 2.35 rejects this program.
data {
  int<lower=0> N;                          // rows
  int<lower=2> K;                          // groups (public)
  array[N] int<lower=1, upper=K> group;    // each row's group
  vector[N] y;                             // each row's outcome
}
parameters {
  real mu;
  sum_to_zero_vector[K] effect;
  real<lower=0> sigma;
}
model {
  mu ~ normal(0, 5);
  effect ~ normal(0, 1);
  sigma ~ lognormal(0, 1);
  y ~ normal(mu + effect[group], sigma);
}
