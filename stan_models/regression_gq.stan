// Linear regression with transformed parameters and generated quantities that draw from an RNG.
data {
  int<lower=0> N;
  vector[N] x;
  vector[N] y;
}
parameters {
  real alpha;
  real beta;
  real<lower=0> sigma;
}
transformed parameters {
  real log_sigma = log(sigma);
  vector[2] coef = [alpha, beta]';
}
model {
  alpha ~ normal(0, 5);
  beta ~ normal(0, 5);
  sigma ~ exponential(1);
  y ~ normal(alpha + beta * x, sigma);
}
generated quantities {
  real y_new = normal_rng(alpha + beta * 1.5, sigma);
  int above = y_new > alpha;
}
