functions {
  void sdp_row_lp(int sdp_i, data matrix x, data array[] int y, real alpha, vector beta) {
    y[sdp_i] ~ bernoulli_logit(alpha + x[sdp_i] * beta);
  }
  void sdp_shard_rows(data matrix x, data array[] int y, real alpha, vector beta);
}
data {
  int<lower=0> N;
  int<lower=1> K;
  matrix[N, K] x;
  array[N] int<lower=0, upper=1> y;
  real<lower=0> prior_sd;
}
parameters {
  real alpha;
  vector[K] beta;
}
model {
  sdp_shard_rows(x, y, alpha, beta);
}
