// Rows that fail, for the tests of how a row's failure is handled (a test program, not a model to fit):
//  - an index out of range (j[n] > 3) throws: that row's value and gradient are NaN;
//  - a negative scale (s[n] < 0) is a domain error: that row's value is -inf, its gradient zero;
//  - a row with y[n] > 1 throws a non-domain error (a size mismatch, std::invalid_argument) when mu > 0.
data {
  int<lower=0> N;
  array[N] int<lower=1> j;
  array[N] real s;
  vector[N] y;
  vector[3] z;
}
parameters {
  real mu;
}
model {
  mu ~ normal(0, 1);
  for (n in 1 : N) {
    if (y[n] > 1 && mu > 0) {
      vector[2] a = rep_vector(1, 2);
      vector[n + 2] b = rep_vector(1, n + 2);
      target += dot_product(a, b);
    }
    y[n] ~ normal(mu + z[j[n]], s[n]);
  }
}
