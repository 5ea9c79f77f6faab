// Support for probe.cpp: the current-request pointer of shard_hooks.hpp, a driver that evaluates all rows of a
// shard model (values, or values and gradients by the row loop's reverse sweeps) and a CPU clock.
#include <stan/model/model_header.hpp>
#include "shard_hooks.hpp"
#include <stan/io/array_var_context.hpp>
#include <chrono>
#include <random>
#include <iostream>
namespace stan_dp { namespace shard {
call*& current_call() { static thread_local call* c = nullptr; return c; }
}}
// run value+grad for all rows of a shard model
inline double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
void shard_eval(const stan::model::model_base& m, const Eigen::VectorXd& theta, int64_t n, double* values, double* grads, unsigned char* status, bool grad) {
  using namespace stan_dp::shard;
  static thread_local stan::math::ChainableStack tape;
  int d = theta.size();
  std::fill(values, values + n, 0.0);
  std::fill(status, status + n, 0);
  call c; c.n = n; c.values = values; c.status = status; c.dim = d;
  if (!grad) {
    Eigen::VectorXd x = theta;
    current_call() = &c;
    m.log_prob(x, nullptr);
    current_call() = nullptr;
    return;
  }
  std::fill(grads, grads + n * d, 0.0);
  c.grads = grads;
  stan::math::nested_rev_autodiff nested;
  Eigen::Matrix<stan::math::var, -1, 1> xv(d);
  std::vector<stan::math::vari*> tv(d);
  for (int j = 0; j < d; ++j) { xv(j) = theta(j); tv[j] = xv(j).vi_; }
  c.theta = tv.data();
  c.stack_begin = stan::math::ChainableStack::instance_->var_stack_.size();
  c.nochain_begin = stan::math::ChainableStack::instance_->var_nochain_stack_.size();
  current_call() = &c;
  m.log_prob(xv, nullptr);
  current_call() = nullptr;
}
#include <ctime>
inline double cpu_now() { timespec ts; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); return ts.tv_sec + 1e-9 * ts.tv_nsec; }
