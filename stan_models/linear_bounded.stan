// A normal linear regression whose data block declares public bounds for the outcome and the covariates
// (what algorithm="dp-ssp" reads): y = alpha + x * beta + noise.
data {
  int<lower=0> N;
  int<lower=0> K;
  matrix<lower=-2, upper=2>[N, K] x;
  vector<lower=-6, upper=6>[N] y;
}
parameters {
  real alpha;
  vector[K] beta;
  real<lower=0> sigma;
}
model {
  alpha ~ normal(0, 5);
  beta ~ normal(0, 5);
  sigma ~ normal(0, 5);
  y ~ normal(alpha + x * beta, sigma);
}
