// Forward mode against reverse sweeps per row on a shard program ("choose the differentiation strategy
// by measurement"). The row loop here is specialised for fvar<double>: one log density evaluation per component
// of theta, each giving one column of the rows' Jacobian. Build and run with run.sh.
#include "probe_support.hpp"
#include <stan/math/mix.hpp>
namespace logit_shard_model_namespace {
template <typename T0, typename T1, typename T2, typename T3>
void sdp_shard_rows(const T0& a0, const T1& a1, const T2& a2, const T3& a3, std::ostream* pstream__);
}
#include "logit_shard.hpp"
// forward-mode row loop: direction `fwd_dir` of theta; values and one gradient column per pass
static thread_local int fwd_dir = 0;
namespace logit_shard_model_namespace {
template <typename T0, typename T1, typename T2, typename T3>
void sdp_shard_rows(const T0& a0, const T1& a1, const T2& a2, const T3& a3, std::ostream* pstream__) {
  using namespace stan_dp::shard;
  using scalar = stan::return_type_t<T0, T1, T2, T3>;
  call* c = current_call();
  if constexpr (std::is_same<scalar, stan::math::fvar<double>>::value) {
    scalar lp(0.0);
    for (int64_t k = 0; k < c->n; ++k) {
      row_accumulator<scalar> acc;
      sdp_row_lp<false>(c->local_index(k), a0, a1, a2, a3, lp, acc, pstream__);
      scalar t = acc.sum();
      c->values[k] = t.val();
      c->grads[k * c->dim + fwd_dir] = t.d();
    }
  } else {
    run_rows([&](int i, auto& lp, auto& acc) { sdp_row_lp<false>(i, a0, a1, a2, a3, lp, acc, pstream__); }, a0, a1, a2, a3);
  }
}
}
int main() {
  int N = 100000, K = 9;
  std::mt19937 rng(1); std::normal_distribution<double> nd;
  std::vector<double> xs(N * K); for (auto& v : xs) v = nd(rng);
  std::vector<int> ys(N); for (auto& v : ys) v = rng() % 2;
  std::vector<double> vals_r(xs); vals_r.push_back(2.5);
  std::vector<int> vals_i = {N, K}; vals_i.insert(vals_i.end(), ys.begin(), ys.end());
  stan::io::array_var_context ctx({"x", "prior_sd"}, vals_r, {{(size_t)N, (size_t)K}, {}}, {"N", "K", "y"}, vals_i, {{}, {}, {(size_t)N}});
  logit_shard_model_namespace::logit_shard_model m(ctx, 0, nullptr);
  int d = K + 1;
  Eigen::VectorXd theta(d); for (int j = 0; j < d; ++j) theta(j) = 0.1 * j - 0.3;
  std::vector<double> v(N), g(N * d), v2(N), g2(N * d); std::vector<unsigned char> st(N);
  double best_r = 1e9, best_f = 1e9;
  for (int rep = 0; rep < 7; ++rep) {
    double t0 = cpu_now();
    shard_eval(m, theta, N, v.data(), g.data(), st.data(), true);
    double t1 = cpu_now();
    using stan::math::fvar;
    stan_dp::shard::call c; c.n = N; c.values = v2.data(); c.grads = g2.data(); c.status = st.data(); c.dim = d;
    std::vector<int> pi;
    for (int j = 0; j < d; ++j) {
      Eigen::Matrix<fvar<double>, -1, 1> x(d);
      for (int k = 0; k < d; ++k) x(k) = fvar<double>(theta(k), k == j ? 1.0 : 0.0);
      fwd_dir = j; c.hooks = 0;
      stan_dp::shard::current_call() = &c;
      m.template log_prob_impl<false, false>(x, pi, nullptr);
    }
    double t2 = cpu_now();
    best_r = std::min(best_r, t1 - t0); best_f = std::min(best_f, t2 - t1);
  }
  double md = 0; for (int k = 0; k < N * d; ++k) md = std::max(md, std::abs(g[k] - g2[k]));
  std::printf("reverse (row sweeps) %.1f ns/row; forward (%d fvar passes) %.1f ns/row; max |diff| %.2e\n", best_r / N * 1e9, d, best_f / N * 1e9, md);
}
