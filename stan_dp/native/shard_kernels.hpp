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

// Row vectors of up to this many entries live on the stack.
constexpr int STACK_DIM = 64;

// The term of one row given the lower-triangular inverse `inv` of a Cholesky factor (row-major) and its transpose:
// value `constant - 0.5 |inv (y - mu)|^2`, and d/dmu = inv' inv (y - mu) = -d/dy.
template <typename Ty, typename Tmu>
stan::return_type_t<Ty, Tmu> gaussian_row(const Ty& y, const Tmu& mu, const site_slot& s, double constant) {
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
  for (int i = 0; i < d; ++i) r[i] = stan::math::value_of(y.coeff(i)) - stan::math::value_of(mu.coeff(i));
  double q = 0.0;
  for (int i = 0; i < d; ++i) {
    const double* row = s.a.data() + static_cast<size_t>(i) * d;
    double acc = 0.0;
    for (int j = 0; j <= i; ++j) acc += row[j] * r[j];
    half[i] = acc;
    q += acc * acc;
  }
  const double logp = constant - 0.5 * q;
  constexpr bool y_var = !stan::is_constant_all<Ty>::value;
  constexpr bool mu_var = !stan::is_constant_all<Tmu>::value;
  if constexpr (!y_var && !mu_var) {
    return logp;
  } else {
    for (int j = 0; j < d; ++j) {
      const double* row = s.b.data() + static_cast<size_t>(j) * d;
      double acc = 0.0;
      for (int i = j; i < d; ++i) acc += row[i] * half[i];
      scaled[j] = acc;
    }
    const int n_ops = (y_var ? d : 0) + (mu_var ? d : 0);
    auto& arena = stan::math::ChainableStack::instance_->memalloc_;
    stan::math::vari** ops = arena.template alloc_array<stan::math::vari*>(n_ops);
    double* parts = arena.template alloc_array<double>(n_ops);
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
template <typename Ty, typename Tmu, typename TL>
stan::return_type_t<Ty, Tmu, TL> sdp_multi_normal_cholesky_row(const int& site, const Ty& y, const Tmu& mu,
                                                               const TL& L, std::ostream* = nullptr) {
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
    stan::math::check_finite(function, "Location parameter", stan::math::value_of(mu_ref));
    stan::math::check_not_nan(function, "Random variable", stan::math::value_of(y_ref));
    if (d == 0) return 0.0;
    site_slot& s = c->site(site);
    if (!s.ready) {
      const Eigen::MatrixXd L_val = L;
      store_inverse(s, L_val);
      s.constant = stan::math::NEG_LOG_SQRT_TWO_PI * d;
      s.constant -= stan::math::sum(stan::math::log(L_val.diagonal()));
      s.ready = true;
    }
    return gaussian_row(y_ref, mu_ref, s, s.constant);
  }
}

// multi_normal_lpdf(y | mu, Sigma), Sigma data-free. The checks of Sigma (positive size, symmetry, a positive
// definite LDLT factorisation) and its log determinant are Stan's own, done once; a failed check is remembered
// and thrown again (std::domain_error, as Stan throws it) for every row.
template <typename Ty, typename Tmu, typename TS>
stan::return_type_t<Ty, Tmu, TS> sdp_multi_normal_row(const int& site, const Ty& y, const Tmu& mu,
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
    stan::math::check_finite(function, "Location parameter", stan::math::value_of(mu_ref));
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
    return gaussian_row(y_ref, mu_ref, s, s.constant);
  }
}

}  // namespace shard
}  // namespace stan_dp

#endif
