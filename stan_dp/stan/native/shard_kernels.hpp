// Per-row kernels of the shard program (see stan_dp/shard_program.py, KERNELS): multivariate normal terms whose
// covariance argument is data-free, so that the work Stan's own functions redo for every row (copying and
// inverting the Cholesky factor, factorising the covariance, the log determinant) is done once per evaluation.
//
// Each kernel takes a call-site number from the rewrite; the prepared covariance lives in that site's slot of the
// current request and is valid for the whole row loop (the rewrite passes a data-free argument, which cannot
// change between rows). Values, argument checks and the type of every exception follow Stan's functions of the
// same name; the gradient is analytic, on one autodiff node per row. With an autodiff covariance, other argument
// types, or outside a shard evaluation, a kernel calls Stan's function.
#ifndef STAN_DP_NATIVE_SHARD_KERNELS_HPP
#define STAN_DP_NATIVE_SHARD_KERNELS_HPP

#include "shard_hooks.hpp"

#include <stan/math.hpp>

#include <stdexcept>
#include <type_traits>

namespace stan_dp {
namespace shard {

// A scalar whose gradient with respect to n operands is known (operands and partials on the autodiff arena).
class partials_vari final : public stan::math::vari {
 public:
  partials_vari(double value, int n, stan::math::vari** operands, double* partials)
      : stan::math::vari(value), n_(n), operands_(operands), partials_(partials) {}
  void chain() override {
    for (int k = 0; k < n_; ++k) operands_[k]->adj_ += adj_ * partials_[k];
  }

 private:
  int n_;
  stan::math::vari** operands_;
  double* partials_;
};

// The values of a data-free vector argument (the same for every row of an evaluation), read and checked finite
// once: a failed check is remembered and thrown again for every row (std::domain_error, as Stan's check).
template <typename T>
const double* cached_finite(site_slot& s, const char* function, const char* name, const T& v) {
  if (s.cached == 0) {
    s.cached = -1;
    stan::math::check_finite(function, name, stan::math::value_of(v));
    s.values.resize(v.size());
    for (Eigen::Index k = 0; k < v.size(); ++k) s.values[k] = stan::math::value_of(v.coeff(k));
    s.cached = 1;
  }
  if (s.cached < 0) throw std::domain_error(std::string(function) + ": " + name + " is not finite");
  return s.values.data();
}

// Row vectors of up to this many entries live on the stack.
constexpr int STACK_DIM = 64;

// half = inv r (inv lower-triangular, row-major in s.a), q = |half|^2, and with Gradient scaled = inv' half (inv'
// row-major in s.b). D > 0: the dimension known at compile time; D = 0: `d` at run time. Same operations in the
// same order either way.
template <int D, bool Gradient>
inline void triangular_products(const site_slot& s, const double* r, double* half, double* scaled, double& q,
                                int d = D) {
  const int n = D > 0 ? D : d;
  // half[i] = sum_j a[i][j] r[j] (j = 0..i, in that order); for a known dimension the loops unroll completely and
  // the rows' sums proceed side by side in registers. b is a's transpose, row-major: column j of a.
  if constexpr (D > 0) {
    double h[D];
    const double* b = s.b.data();
#pragma GCC unroll 16
    for (int i = 0; i < D; ++i) h[i] = 0.0;
#pragma GCC unroll 16
    for (int j = 0; j < D; ++j) {
#pragma GCC unroll 16
      for (int i = j; i < D; ++i) h[i] += b[j * D + i] * r[j];
    }
#pragma GCC unroll 16
    for (int i = 0; i < D; ++i) {
      half[i] = h[i];
      q += h[i] * h[i];
    }
    if constexpr (Gradient) {
      // scaled[j] = sum_i a[i][j] half[i] (i = j..D-1, in that order)
      double g[D];
      const double* a = s.a.data();
#pragma GCC unroll 16
      for (int j = 0; j < D; ++j) g[j] = 0.0;
#pragma GCC unroll 16
      for (int i = 0; i < D; ++i) {
#pragma GCC unroll 16
        for (int j = 0; j <= i; ++j) g[j] += a[i * D + j] * h[i];
      }
#pragma GCC unroll 16
      for (int j = 0; j < D; ++j) scaled[j] = g[j];
    }
  } else {
    const double* a = s.a.data();
    for (int i = 0; i < n; ++i) {
      const double* row = a + static_cast<size_t>(i) * n;
      double acc = 0.0;
      for (int j = 0; j <= i; ++j) acc += row[j] * r[j];
      half[i] = acc;
      q += acc * acc;
    }
    if constexpr (Gradient) {
      const double* b = s.b.data();
      for (int j = 0; j < n; ++j) {
        const double* row = b + static_cast<size_t>(j) * n;
        double acc = 0.0;
        for (int i = j; i < n; ++i) acc += row[i] * half[i];
        scaled[j] = acc;
      }
    }
  }
}

// The term of one row given the lower-triangular inverse `inv` of a Cholesky factor (row-major) and its transpose:
// value `constant - 0.5 |inv (y - mu)|^2`, and d/dmu = inv' inv (y - mu) = -d/dy.
template <typename Ty, typename Tmu>
stan::return_type_t<Ty, Tmu> gaussian_row(call* c, const Ty& y, const Tmu& mu, const double* mu_val, site_slot& s,
                                          double constant, bool fixed) {
  const int d = static_cast<int>(y.size());
  double stack[3 * STACK_DIM];
  std::vector<double> heap;
  double* r = stack;
  if (d > STACK_DIM) {
    heap.resize(3 * static_cast<size_t>(d));
    r = heap.data();
  }
  double* half = r + d;
  double* scaled = half + d;
  if (mu_val != nullptr) {
    for (int i = 0; i < d; ++i) r[i] = stan::math::value_of(y.coeff(i)) - mu_val[i];
  } else {
    for (int i = 0; i < d; ++i) r[i] = stan::math::value_of(y.coeff(i)) - stan::math::value_of(mu.coeff(i));
  }
  double q = 0.0;
  constexpr bool y_var = !stan::is_constant_all<Ty>::value;
  constexpr bool mu_var = !stan::is_constant_all<Tmu>::value;
  constexpr bool gradient = y_var || mu_var;
  switch (d) {  // small dimensions: loops of known length, unrolled
    case 1: triangular_products<1, gradient>(s, r, half, scaled, q); break;
    case 2: triangular_products<2, gradient>(s, r, half, scaled, q); break;
    case 3: triangular_products<3, gradient>(s, r, half, scaled, q); break;
    case 4: triangular_products<4, gradient>(s, r, half, scaled, q); break;
    case 5: triangular_products<5, gradient>(s, r, half, scaled, q); break;
    case 6: triangular_products<6, gradient>(s, r, half, scaled, q); break;
    case 7: triangular_products<7, gradient>(s, r, half, scaled, q); break;
    case 8: triangular_products<8, gradient>(s, r, half, scaled, q); break;
    case 9: triangular_products<9, gradient>(s, r, half, scaled, q); break;
    case 10: triangular_products<10, gradient>(s, r, half, scaled, q); break;
    case 11: triangular_products<11, gradient>(s, r, half, scaled, q); break;
    case 12: triangular_products<12, gradient>(s, r, half, scaled, q); break;
    default: triangular_products<0, gradient>(s, r, half, scaled, q, d);
  }
  const double logp = constant - 0.5 * q;
  if constexpr (!gradient) {
    return logp;
  } else {
    const int n_ops = (y_var ? d : 0) + (mu_var ? d : 0);
    auto operands = [&](stan::math::vari** ops, double* parts) {
      int k = 0;
      if constexpr (y_var)
        for (int j = 0; j < d; ++j, ++k) {
          ops[k] = y.coeff(j).vi_;
          parts[k] = -scaled[j];
        }
      if constexpr (mu_var)
        for (int j = 0; j < d; ++j, ++k) {
          ops[k] = mu.coeff(j).vi_;
          parts[k] = scaled[j];
        }
    };
    auto& arena = stan::math::ChainableStack::instance_->memalloc_;
    if (fixed && c->row_grad != nullptr && n_ops <= 2 * STACK_DIM) {
      double parts[2 * STACK_DIM];
      if (s.direct == 0) {
        stan::math::vari* ops[2 * STACK_DIM];
        operands(ops, parts);
        direct_map(c, s, ops, n_ops);
      }
      if (s.direct == 1) {
        int k = 0;
        if constexpr (y_var)
          for (int j = 0; j < d; ++j) parts[k++] = -scaled[j];
        if constexpr (mu_var)
          for (int j = 0; j < d; ++j) parts[k++] = scaled[j];
        direct_add(c, s, parts, n_ops);
        return stan::math::var(new stan::math::vari(logp, false));
      }
    }
    stan::math::vari** ops = arena.template alloc_array<stan::math::vari*>(n_ops);
    double* parts = arena.template alloc_array<double>(n_ops);
    operands(ops, parts);
    return stan::math::var(new partials_vari(logp, n_ops, ops, parts));
  }
}

// Inverse of a lower-triangular factor, row-major, and its transpose.
template <typename T>
void store_inverse(site_slot& s, const T& lower) {
  s.a = stan::math::mdivide_left_tri<Eigen::Lower>(lower);
  s.b = s.a.transpose();
}

template <typename Ty, typename Tmu, typename TL>
constexpr bool fast_gaussian() {
  return stan::is_col_vector<Ty>::value && stan::is_col_vector<Tmu>::value
         && std::is_arithmetic<stan::value_type_t<TL>>::value && stan::is_eigen<TL>::value;
}

// multi_normal_cholesky_lpdf(y | mu, L), L data-free.
// `fixed`: 1 when y and mu are data or data-free (the same autodiff variables for every row: direct gradients).
template <typename Ty, typename Tmu, typename TL>
stan::return_type_t<Ty, Tmu, TL> sdp_multi_normal_cholesky_row(const int& site, const int& fixed, const Ty& y,
                                                               const Tmu& mu, const TL& L,
                                                               std::ostream* = nullptr) {
  call* c = current_call();
  if constexpr (!fast_gaussian<Ty, Tmu, TL>()) {
    return stan::math::multi_normal_cholesky_lpdf<false>(y, mu, L);
  } else {
    if (c == nullptr) return stan::math::multi_normal_cholesky_lpdf<false>(y, mu, L);
    static constexpr const char* function = "multi_normal_cholesky_lpdf";
    const auto& y_ref = stan::math::to_ref(y);
    const auto& mu_ref = stan::math::to_ref(mu);
    const int d = static_cast<int>(y_ref.size());
    stan::math::check_size_match(function, "Size of random variable", d, "size of location parameter",
                                 mu_ref.size());
    stan::math::check_size_match(function, "Size of random variable", d, "rows of covariance parameter", L.rows());
    stan::math::check_size_match(function, "Size of random variable", d, "columns of covariance parameter",
                                 L.cols());
    site_slot& s = c->site(site);
    const double* mu_val = nullptr;
    if (fixed && stan::is_var<stan::value_type_t<Tmu>>::value) {
      mu_val = cached_finite(c->site(-site), function, "Location parameter", mu_ref);
    } else {
      stan::math::check_finite(function, "Location parameter", stan::math::value_of(mu_ref));
    }
    stan::math::check_not_nan(function, "Random variable", stan::math::value_of(y_ref));
    if (d == 0) return 0.0;
    if (!s.ready) {
      const Eigen::MatrixXd L_val = L;
      store_inverse(s, L_val);
      s.constant = stan::math::NEG_LOG_SQRT_TWO_PI * d;
      s.constant -= stan::math::sum(stan::math::log(L_val.diagonal()));
      s.ready = true;
    }
    return gaussian_row(c, y_ref, mu_ref, mu_val, s, s.constant, fixed != 0);
  }
}

// multi_normal_lpdf(y | mu, Sigma), Sigma data-free. The checks of Sigma (positive size, symmetry, a positive
// definite LDLT factorisation) and its log determinant are Stan's own, done once; a failed check is remembered
// and thrown again (std::domain_error, as Stan throws it) for every row.
template <typename Ty, typename Tmu, typename TS>
stan::return_type_t<Ty, Tmu, TS> sdp_multi_normal_row(const int& site, const int& fixed, const Ty& y, const Tmu& mu,
                                                      const TS& Sigma, std::ostream* = nullptr) {
  call* c = current_call();
  if constexpr (!fast_gaussian<Ty, Tmu, TS>()) {
    return stan::math::multi_normal_lpdf<false>(y, mu, Sigma);
  } else {
    if (c == nullptr) return stan::math::multi_normal_lpdf<false>(y, mu, Sigma);
    static constexpr const char* function = "multi_normal_lpdf";
    stan::math::check_positive(function, "Covariance matrix rows", Sigma.rows());
    const auto& y_ref = stan::math::to_ref(y);
    const auto& mu_ref = stan::math::to_ref(mu);
    const int d = static_cast<int>(y_ref.size());
    const double* mu_val = nullptr;
    if (fixed && stan::is_var<stan::value_type_t<Tmu>>::value) {
      mu_val = cached_finite(c->site(-site), function, "Location parameter", mu_ref);
    } else {
      stan::math::check_finite(function, "Location parameter", stan::math::value_of(mu_ref));
    }
    stan::math::check_not_nan(function, "Random variable", stan::math::value_of(y_ref));
    stan::math::check_size_match(function, "Size of random variable", d, "size of location parameter",
                                 mu_ref.size());
    stan::math::check_size_match(function, "Size of random variable", d, "rows of covariance parameter",
                                 Sigma.rows());
    stan::math::check_size_match(function, "Size of random variable", d, "columns of covariance parameter",
                                 Sigma.cols());
    site_slot& s = c->site(site);
    if (!s.ready) {
      s.ready = true;
      s.failed = true;  // until the checks below pass (each throws std::domain_error)
      const Eigen::MatrixXd S = Sigma;
      stan::math::check_symmetric(function, "Covariance matrix", S);
      auto ldlt = stan::math::make_ldlt_factor(S);
      stan::math::check_ldlt_factor(function, "LDLT_Factor of covariance parameter", ldlt);
      s.constant = stan::math::NEG_LOG_SQRT_TWO_PI * d;
      s.constant += -0.5 * stan::math::log_determinant_ldlt(ldlt);
      Eigen::LLT<Eigen::MatrixXd> llt(S);
      if (llt.info() != Eigen::Success) throw std::domain_error("multi_normal_lpdf: covariance not positive definite");
      const Eigen::MatrixXd lower = llt.matrixL();
      store_inverse(s, lower);
      s.failed = false;
    }
    if (s.failed) throw std::domain_error("multi_normal_lpdf: the covariance matrix failed its checks");
    if (d == 0) return 0.0;
    return gaussian_row(c, y_ref, mu_ref, mu_val, s, s.constant, fixed != 0);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Generalised linear model rows: dist(y | alpha + x_row * beta [, sigma]) with x_row a row of a data matrix, fused
// into one autodiff node per row whose operands are alpha, beta (and sigma): Stan records a dot product, a sum and
// the distribution, and allocates per call for scalar arguments. Checks, special cases and formulas are those of
// Stan's multiply and bernoulli_logit_lpmf / poisson_log_lpmf / normal_lpdf, in the same order.

// alpha + x * beta; beta's values come from the site's second slot (read once: beta is data-free).
template <typename Tx, typename Ta, typename Tb>
double linear_predictor(call* c, int site, const Tx& x, const Ta& alpha, const Tb& beta) {
  stan::math::check_size_match("multiply", "Columns of m1", x.cols(), "Rows of m2", beta.rows());
  double dot = 0.0;
  if (c != nullptr && stan::is_var<stan::value_type_t<Tb>>::value) {
    site_slot& s = c->site(-site);
    if (s.cached == 0) {
      s.values.resize(beta.size());
      for (Eigen::Index k = 0; k < beta.size(); ++k) s.values[k] = stan::math::value_of(beta.coeff(k));
      s.cached = 1;
    }
    const double* b = s.values.data();
    for (Eigen::Index k = 0; k < x.cols(); ++k) dot += x.coeff(k) * b[k];
  } else {
    for (Eigen::Index k = 0; k < x.cols(); ++k) dot += x.coeff(k) * stan::math::value_of(beta.coeff(k));
  }
  return stan::math::value_of(alpha) + dot;
}

// value, d/deta and (with a scale) d/dsigma -> one node over alpha, beta and sigma (those that are autodiff).
template <typename Tx, typename Ta, typename Tb, typename Ts = double>
stan::return_type_t<Ta, Tb, Ts> glm_node(call* c, int site, double value, double d_eta, const Tx& x,
                                         const Ta& alpha, const Tb& beta, const Ts& sigma = 0.0,
                                         double d_sigma = 0.0) {
  constexpr bool a_var = stan::is_var<Ta>::value;
  constexpr bool b_var = stan::is_var<stan::value_type_t<Tb>>::value;
  constexpr bool s_var = stan::is_var<Ts>::value;
  if constexpr (!a_var && !b_var && !s_var) {
    return value;
  } else {
    const int n_beta = b_var ? static_cast<int>(beta.size()) : 0;
    const int n_ops = (a_var ? 1 : 0) + n_beta + (s_var ? 1 : 0);
    auto fill = [&](stan::math::vari** ops, double* parts) {
      int k = 0;
      if constexpr (a_var) {
        if (ops != nullptr) ops[k] = alpha.vi_;
        parts[k++] = d_eta;
      }
      if constexpr (b_var)
        for (int j = 0; j < n_beta; ++j, ++k) {
          if (ops != nullptr) ops[k] = beta.coeff(j).vi_;
          parts[k] = d_eta * x.coeff(j);
        }
      if constexpr (s_var) {
        if (ops != nullptr) ops[k] = sigma.vi_;
        parts[k++] = d_sigma;
      }
    };
    // alpha, beta and sigma are data-free arguments (the rewrite checks it): direct gradients when they are
    // boundary elements, mapped on the first row of the evaluation.
    if (c != nullptr && c->row_grad != nullptr && n_ops <= 2 * STACK_DIM) {
      site_slot& s = c->site(site);
      double parts[2 * STACK_DIM];
      if (s.direct == 0) {
        stan::math::vari* ops[2 * STACK_DIM];
        fill(ops, parts);
        direct_map(c, s, ops, n_ops);
      }
      if (s.direct == 1) {
        fill(nullptr, parts);
        direct_add(c, s, parts, n_ops);
        return stan::math::var(new stan::math::vari(value, false));
      }
    }
    auto& arena = stan::math::ChainableStack::instance_->memalloc_;
    stan::math::vari** ops = arena.template alloc_array<stan::math::vari*>(n_ops);
    double* parts = arena.template alloc_array<double>(n_ops);
    fill(ops, parts);
    return stan::math::var(new partials_vari(value, n_ops, ops, parts));
  }
}

template <typename Tx, typename Ta, typename Tb>
constexpr bool fast_glm() {
  return std::is_arithmetic<stan::value_type_t<Tx>>::value && stan::is_eigen<Tx>::value
         && stan::is_stan_scalar<Ta>::value && stan::is_eigen_col_vector<Tb>::value;
}

// bernoulli_logit_lpmf(y | alpha + x * beta), y an int.
template <typename Ty, typename Tx, typename Ta, typename Tb>
stan::return_type_t<Tx, Ta, Tb> sdp_glm_bernoulli_logit_row(const int& site, const Ty& y, const Tx& x,
                                                            const Ta& alpha, const Tb& beta,
                                                            std::ostream* = nullptr) {
  if constexpr (!fast_glm<Tx, Ta, Tb>() || !std::is_integral<Ty>::value) {
    return stan::math::bernoulli_logit_lpmf<false>(y, alpha + stan::math::multiply(x, beta));
  } else {
    static constexpr const char* function = "bernoulli_logit_lpmf";
    call* c = current_call();
    const double eta = linear_predictor(c, site, x, alpha, beta);
    stan::math::check_bounded(function, "n", y, 0, 1);
    stan::math::check_not_nan(function, "Logit transformed probability parameter", eta);
    const double sign = 2 * static_cast<double>(y) - 1;
    const double ntheta = sign * eta;
    const double exp_m_ntheta = std::exp(-ntheta);
    constexpr double cutoff = 20.0;
    const double value
        = ntheta > cutoff ? -exp_m_ntheta : (ntheta < -cutoff ? ntheta : -stan::math::log1p(exp_m_ntheta));
    const double d_eta = ntheta > cutoff
                             ? -exp_m_ntheta
                             : (ntheta >= -cutoff ? sign * exp_m_ntheta / (exp_m_ntheta + 1) : sign);
    return glm_node(c, site, value, d_eta, x, alpha, beta);
  }
}

// lgamma(n + 1.0) as Stan computes it, from a table built with that same function for small counts.
inline double log_factorial(int n) {
  constexpr int TABLE = 4096;
  static const std::vector<double> table = []() {
    std::vector<double> t(TABLE);
    for (int k = 0; k < TABLE; ++k) t[k] = stan::math::lgamma(k + 1.0);
    return t;
  }();
  return n >= 0 && n < TABLE ? table[n] : stan::math::lgamma(n + 1.0);
}

// poisson_log_lpmf(y | alpha + x * beta), y an int.
template <typename Ty, typename Tx, typename Ta, typename Tb>
stan::return_type_t<Tx, Ta, Tb> sdp_glm_poisson_log_row(const int& site, const Ty& y, const Tx& x, const Ta& alpha,
                                                        const Tb& beta, std::ostream* = nullptr) {
  if constexpr (!fast_glm<Tx, Ta, Tb>() || !std::is_integral<Ty>::value) {
    return stan::math::poisson_log_lpmf<false>(y, alpha + stan::math::multiply(x, beta));
  } else {
    static constexpr const char* function = "poisson_log_lpmf";
    call* c = current_call();
    const double eta = linear_predictor(c, site, x, alpha, beta);
    stan::math::check_nonnegative(function, "Random variable", y);
    stan::math::check_not_nan(function, "Log rate parameter", eta);
    if (eta == stan::math::INFTY || (eta == stan::math::NEGATIVE_INFTY && y != 0))
      return stan::return_type_t<Tx, Ta, Tb>(stan::math::LOG_ZERO);
    const double exp_eta = std::exp(eta);
    double value = y * eta;
    value -= exp_eta;
    value -= log_factorial(y);
    return glm_node(c, site, value, y - exp_eta, x, alpha, beta);
  }
}

// normal_lpdf(y | alpha + x * beta, sigma), y a real datum.
template <typename Ty, typename Tx, typename Ta, typename Tb, typename Ts>
stan::return_type_t<Tx, Ta, Tb, Ts> sdp_glm_normal_row(const int& site, const Ty& y, const Tx& x, const Ta& alpha,
                                                       const Tb& beta, const Ts& sigma, std::ostream* = nullptr) {
  call* c = current_call();
  if constexpr (!fast_glm<Tx, Ta, Tb>() || !std::is_arithmetic<Ty>::value || !stan::is_stan_scalar<Ts>::value) {
    return stan::math::normal_lpdf<false>(y, alpha + stan::math::multiply(x, beta), sigma);
  } else {
    if (c == nullptr) return stan::math::normal_lpdf<false>(y, alpha + stan::math::multiply(x, beta), sigma);
    static constexpr const char* function = "normal_lpdf";
    const double mu = linear_predictor(c, site, x, alpha, beta);
    const double s = stan::math::value_of(sigma);
    stan::math::check_not_nan(function, "Random variable", y);
    stan::math::check_finite(function, "Location parameter", mu);
    stan::math::check_positive(function, "Scale parameter", s);
    site_slot& slot = c->site(site);
    if (!slot.ready) {  // sigma is data-free: its logarithm once per evaluation
      slot.constant = std::log(s);
      slot.ready = true;
    }
    const double inv_sigma = 1.0 / s;
    const double z = (y - mu) * inv_sigma;
    const double z2 = z * z;
    double value = -0.5 * z2;
    value += stan::math::NEG_LOG_SQRT_TWO_PI;
    value -= slot.constant;
    return glm_node(c, site, value, inv_sigma * z, x, alpha, beta, sigma, inv_sigma * z2 - inv_sigma);
  }
}

}  // namespace shard
}  // namespace stan_dp

#endif
