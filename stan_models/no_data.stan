// A model with no data block: a correlated 2-d normal and a positive scale.
parameters {
  vector[2] mu;
  real<lower=0> s;
}
model {
  mu ~ multi_normal([1, -1]', [[1, 0.5], [0.5, 2]]);
  s ~ gamma(2, 1);
}
