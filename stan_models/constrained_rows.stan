// One row variable of every constrained data type Stan checks, for testing that Stan's messages about a row
// that violates its declared constraint reach the user without the row's values. Only b enters the likelihood.
data {
  int<lower=0> N;
  vector<lower=0>[N] b;
  array[N] real<lower=-1, upper=1> r;
  array[N] simplex[3] s;
  array[N] ordered[3] o;
  array[N] positive_ordered[3] po;
  array[N] unit_vector[3] u;
  array[N] cholesky_factor_corr[2] lcorr;
  array[N] cholesky_factor_cov[2] lcov;
  array[N] corr_matrix[2] cr;
  array[N] cov_matrix[2] cv;
}
parameters {
  real mu;
}
model {
  mu ~ normal(0, 1);
  b ~ normal(mu, 1);
}
