// posteriordb earnings-logearn_height: log earnings on height (flat priors). The transformed data is
// row-wise (log of each row's earnings), so the likelihood still factorises over rows.
data {
  int<lower=0> N;
  vector[N] earn;
  vector[N] height;
}
transformed data {
  vector[N] log_earn = log(earn);
}
parameters {
  vector[2] beta;
  real<lower=0> sigma;
}
model {
  log_earn ~ normal(beta[1] + beta[2] * height, sigma);
}
