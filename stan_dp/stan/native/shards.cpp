// The shard engine: per-row log-likelihoods l_i(theta) and their gradients from shard instances, one model
// instance of the shard program (stan_dp/shard_program.py) per contiguous range of rows.
//
// A shard instance holds its rows once, as Stan holds data, and evaluates any set of its rows in one log density
// evaluation: the data-free part of the program (parameter transforms, transformed parameters, data-free model
// statements) runs once, then the row loop of shard_hooks.hpp evaluates the requested rows. One call serves any
// index set: the rows are grouped by shard, and the groups are cut into chunks that run in parallel TBB threads.
//
// Non-finite rule (as the per-row engine in rows.cpp): a row whose evaluation throws std::domain_error gets -inf
// and a zero gradient, any other exception NaN and a NaN gradient; the data-free part throwing a domain error
// makes every row of the call -inf. No message from a row is kept.
#include "row_data.hpp"
#include "shard_hooks.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <numeric>

namespace stan_dp {
namespace shard {

call*& current_call() {
  static thread_local call* current = nullptr;
  return current;
}

}  // namespace shard
}  // namespace stan_dp

struct sdp_shards {
  int64_t n_rows = 0;
  int dim = 0;
  int threads = 1;
  std::unique_ptr<stan::model::model_base> prior;  // the user's program on no rows: log p0(theta), with Jacobian
  std::vector<std::unique_ptr<stan::model::model_base>> shards;
  std::vector<int64_t> offsets;  // first global row of each shard, then n_rows
};

namespace {

using stan_dp::shard::call;
using stan_dp::shard::ROW_DOMAIN;
using stan_dp::shard::ROW_OK;
using stan_dp::shard::ROW_OTHER;

constexpr double NEG_INF = -std::numeric_limits<double>::infinity();
constexpr double NOT_A_NUMBER = std::numeric_limits<double>::quiet_NaN();

// Rows per task: below two chunks a call runs in the calling thread.
constexpr int64_t MIN_CHUNK = 64;

tbb::task_arena& thread_arena(int threads) {
  static thread_local std::unique_ptr<tbb::task_arena> arena;
  if (!arena || arena->max_concurrency() != threads) arena.reset(new tbb::task_arena(threads));
  return *arena;
}

// One piece of a request: rows [begin, end) of the (grouped) request, all in shard `shard`.
struct chunk {
  size_t shard;
  int64_t begin, end;
};

// Run the shard program once for rows [begin, end) of a request whose global rows are `rows` (or the contiguous
// rows from `first` when rows == nullptr), writing values, gradients (when grads != nullptr) and statuses.
void evaluate_chunk(const sdp_shards& h, size_t s, const int64_t* rows, int64_t first, int64_t n,
                    const double* theta, double* values, double* grads, unsigned char* status) {
  const int d = h.dim;
  std::fill(values, values + n, 0.0);
  std::fill(status, status + n, static_cast<unsigned char>(ROW_OK));
  if (grads != nullptr) std::fill(grads, grads + n * d, 0.0);
  call c;
  c.rows = rows;
  c.first = first;
  c.n = n;
  c.offset = h.offsets[s];
  c.values = values;
  c.grads = grads;
  c.status = status;
  c.dim = d;
  const stan::model::model_base& model = *h.shards[s];
  struct reset_current {
    ~reset_current() { stan_dp::shard::current_call() = nullptr; }
  } reset;
  try {
    if (grads == nullptr) {
      Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta, d);
      stan_dp::shard::current_call() = &c;
      model.log_prob(x, nullptr);
    } else {
      stan_dp::ensure_ad_tape();
      stan::math::nested_rev_autodiff tape;
      Eigen::Matrix<stan::math::var, -1, 1> xv(d);
      std::vector<stan::math::vari*> theta_vi(d);
      for (int j = 0; j < d; ++j) {
        xv.coeffRef(j) = stan::math::var(theta[j]);
        theta_vi[j] = xv.coeff(j).vi_;
      }
      c.theta = theta_vi.data();
      c.stack_begin = stan::math::ChainableStack::instance_->var_stack_.size();
      c.nochain_begin = stan::math::ChainableStack::instance_->var_nochain_stack_.size();
      stan_dp::shard::current_call() = &c;
      model.log_prob(xv, nullptr);
    }
  } catch (const std::domain_error&) {
    std::fill(status, status + n, static_cast<unsigned char>(ROW_DOMAIN));
    return;
  }
  if (c.hooks != 1) throw std::logic_error("the shard program did not run its row loop");
}

// Statuses to values: -inf with a zero gradient, NaN with a NaN gradient.
void apply_status(int64_t n, int d, const unsigned char* status, double* values, double* grads) {
  for (int64_t k = 0; k < n; ++k) {
    if (status[k] == ROW_OK) continue;
    const bool domain = status[k] == ROW_DOMAIN;
    values[k] = domain ? NEG_INF : NOT_A_NUMBER;
    if (grads != nullptr) std::fill(grads + k * d, grads + (k + 1) * d, domain ? 0.0 : NOT_A_NUMBER);
  }
}

size_t shard_of(const sdp_shards& h, int64_t row) {
  return static_cast<size_t>(std::upper_bound(h.offsets.begin(), h.offsets.end(), row) - h.offsets.begin() - 1);
}

// Evaluate a request whose rows are grouped by shard (rows == nullptr: all rows in order).
void evaluate_grouped(const sdp_shards& h, const int64_t* rows, int64_t n, const double* theta, double* values,
                      double* grads, unsigned char* status) {
  // Groups: [start, stop) of the request for each shard, in shard order.
  std::vector<chunk> groups;
  if (rows == nullptr) {
    for (size_t s = 0; s + 1 < h.offsets.size(); ++s)
      if (h.offsets[s + 1] > h.offsets[s]) groups.push_back({s, h.offsets[s], h.offsets[s + 1]});
  } else {
    int64_t start = 0;
    while (start < n) {
      size_t s = shard_of(h, rows[start]);
      int64_t stop = start + 1;
      while (stop < n && rows[stop] < h.offsets[s + 1]) ++stop;
      groups.push_back({s, start, stop});
      start = stop;
    }
  }
  const int threads = std::max(1, h.threads);
  const int64_t target = std::max<int64_t>(MIN_CHUNK, (n + 4 * threads - 1) / (4 * threads));
  std::vector<chunk> chunks;
  for (const chunk& g : groups)
    for (int64_t b = g.begin; b < g.end; b += target) chunks.push_back({g.shard, b, std::min(g.end, b + target)});
  const int d = h.dim;
  auto run = [&](const chunk& ch) {
    const int64_t m = ch.end - ch.begin;
    const int64_t* chunk_rows = rows == nullptr ? nullptr : rows + ch.begin;
    evaluate_chunk(h, ch.shard, chunk_rows, ch.begin, m, theta, values + ch.begin,
                   grads == nullptr ? nullptr : grads + ch.begin * d, status + ch.begin);
  };
  if (threads <= 1 || chunks.size() < 2 || n < 2 * MIN_CHUNK) {
    for (const chunk& ch : chunks) run(ch);
    return;
  }
  thread_arena(threads).execute([&]() {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, chunks.size(), 1), [&](const tbb::blocked_range<size_t>& r) {
      for (size_t k = r.begin(); k != r.end(); ++k) run(chunks[k]);
    });
  });
}

void check_indices(const sdp_shards& h, const int64_t* idx, int64_t n) {
  if (idx == nullptr) {
    if (n != h.n_rows) throw std::invalid_argument("n must equal the row count when no row indices are given");
    return;
  }
  if (n < 0) throw std::invalid_argument("the number of row indices must be non-negative");
  for (int64_t k = 0; k < n; ++k)
    if (idx[k] < 0 || idx[k] >= h.n_rows)
      throw std::out_of_range("row index " + std::to_string(idx[k]) + " is outside [0, " +
                              std::to_string(h.n_rows) + ")");
}

// Any request: rows grouped by shard already (sorted, or one shard) are evaluated in place; otherwise they are
// sorted by shard (stably), evaluated, and the results put back in the caller's order.
void evaluate(const sdp_shards& h, const int64_t* idx, int64_t n, const double* theta, double* values,
              double* grads) {
  check_indices(h, idx, n);
  if (n == 0) return;
  const int d = h.dim;
  std::vector<unsigned char> status(static_cast<size_t>(n));
  bool grouped = idx == nullptr || h.shards.size() == 1;
  if (!grouped) {
    grouped = true;
    for (int64_t k = 1; k < n && grouped; ++k) grouped = idx[k] >= idx[k - 1];
  }
  if (grouped) {
    evaluate_grouped(h, idx, n, theta, values, grads, status.data());
    apply_status(n, d, status.data(), values, grads);
    return;
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return shard_of(h, idx[a]) < shard_of(h, idx[b]); });
  std::vector<int64_t> sorted(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) sorted[k] = idx[order[k]];
  std::vector<double> v(static_cast<size_t>(n)), g(grads == nullptr ? 0 : static_cast<size_t>(n) * d);
  evaluate_grouped(h, sorted.data(), n, theta, v.data(), grads == nullptr ? nullptr : g.data(), status.data());
  apply_status(n, d, status.data(), v.data(), grads == nullptr ? nullptr : g.data());
  for (int64_t k = 0; k < n; ++k) {
    values[order[k]] = v[k];
    if (grads != nullptr) std::copy(g.begin() + k * d, g.begin() + (k + 1) * d, grads + order[k] * d);
  }
}

}  // namespace

extern "C" {

// Build the prior instance and `n_shards` shard instances (contiguous, near-equal row ranges; at least one
// row each) from row data, in parallel threads. The data's buffers are read during this call only.
sdp_shards* sdp_shards_construct(const stan_dp::row_data* data, int n_shards, unsigned int seed, int threads,
                                 char** error_msg) {
  std::unique_ptr<sdp_shards> h(new sdp_shards());
  int rc = stan_dp::guarded("sdp_shards_construct", error_msg, [&]() {
    h->threads = threads < 1 ? 1 : threads;
    h->n_rows = data->rows();
    stan_dp::row_range_context none(*data, 0, 0);
    h->prior.reset(&new_model(none, seed, stan_dp::print_stream()));
    h->dim = static_cast<int>(h->prior->num_params_r());
    int64_t count = std::max<int64_t>(1, std::min<int64_t>(n_shards < 1 ? 1 : n_shards, h->n_rows));
    if (h->n_rows == 0) count = 0;
    for (int64_t s = 0; s <= count; ++s) h->offsets.push_back(count == 0 ? 0 : h->n_rows * s / count);
    if (count == 0) h->offsets.push_back(0);
    h->shards.resize(static_cast<size_t>(count));
    std::mutex lock;
    std::string first_error;
    std::atomic<bool> sized_by_rows(false);
    auto build = [&](size_t s) {
      try {
        stan_dp::row_range_context range(*data, h->offsets[s], h->offsets[s + 1] - h->offsets[s]);
        h->shards[s].reset(sdp_new_shard_program_model(range, seed, nullptr));
        if (!h->shards[s]) throw std::invalid_argument("this model library has no shard program");
        if (static_cast<int>(h->shards[s]->num_params_r()) != h->dim) sized_by_rows = true;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> guard(lock);
        if (first_error.empty()) first_error = e.what();
      }
    };
    if (h->threads <= 1 || count < 2) {
      for (size_t s = 0; s < h->shards.size(); ++s) build(s);
    } else {
      thread_arena(h->threads).execute([&]() {
        tbb::parallel_for(size_t(0), h->shards.size(), [&](size_t s) { build(s); });
      });
    }
    if (sized_by_rows) throw std::invalid_argument("the number of unconstrained parameters depends on the row count");
    if (!first_error.empty()) throw std::runtime_error(first_error);
  });
  return rc == 0 ? h.release() : nullptr;
}

void sdp_shards_destruct(sdp_shards* h) { delete h; }

int64_t sdp_shards_count(const sdp_shards* h) { return h->n_rows; }

int sdp_shards_dim(const sdp_shards* h) { return h->dim; }

int sdp_shards_shards(const sdp_shards* h) { return static_cast<int>(h->shards.size()); }

void sdp_shards_set_threads(sdp_shards* h, int threads) { h->threads = threads < 1 ? 1 : threads; }

// Log prior and optionally its gradient (stan_dp::prior_log_density, common.hpp).
int sdp_shards_log_prior(const sdp_shards* h, const double* theta, double* value, double* grad, char** error_msg) {
  return stan_dp::guarded("sdp_shards_log_prior", error_msg, [&]() {
    stan_dp::prior_log_density(*h->prior, h->dim, theta, value, grad);
  });
}

// l_i(theta) for rows idx[0..n) (all rows when idx is NULL; then n must equal the row count).
int sdp_shards_log_lik(const sdp_shards* h, const double* theta, const int64_t* idx, int64_t n, double* out,
                       char** error_msg) {
  return stan_dp::guarded("sdp_shards_log_lik", error_msg,
                          [&]() { evaluate(*h, idx, n, theta, out, nullptr); });
}

// Values (n) and gradients (n x dim, row-major) of l_i at theta.
int sdp_shards_log_lik_grad(const sdp_shards* h, const double* theta, const int64_t* idx, int64_t n, double* out,
                            double* grad_out, char** error_msg) {
  return stan_dp::guarded("sdp_shards_log_lik_grad", error_msg,
                          [&]() { evaluate(*h, idx, n, theta, out, grad_out); });
}

}  // extern "C"
