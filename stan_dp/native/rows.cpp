// The row API: per-row log-likelihoods l_i(theta) = lp_i(theta) - lp_0(theta) and their gradients for the
// private samplers, evaluated in parallel TBB threads into caller-owned buffers.
//
// One call builds every instance from the whole data set: the JSON is parsed once, and each instance reads
// its data through a `row_subset_context`, a var_context view that presents the row count as the number of
// selected rows and every row variable restricted to those rows. The prior instance selects no row (N = 0),
// each row instance selects one row (N = 1). No per-row JSON document is ever written.
#include "common.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

namespace {

// Full values of the row variables, read once. json_data returns values by copy, so reading a row variable
// through it for every row instance would copy the whole column N times (O(N^2) construction).
struct row_values {
  std::map<std::string, std::vector<double>> r;
  std::map<std::string, std::vector<int>> i;
};

// var_context view of a subset of rows of a parsed data set.
class row_subset_context : public stan::io::var_context {
 public:
  row_subset_context(const stan::json::json_data& full, const std::string& count_name,
                     const std::set<std::string>& row_vars, const row_values& cache, size_t n_full,
                     std::vector<size_t> rows)
      : full_(full), count_name_(count_name), row_vars_(row_vars), cache_(cache), n_full_(n_full),
        rows_(std::move(rows)) {}

  bool contains_r(const std::string& name) const override { return full_.contains_r(name); }
  bool contains_i(const std::string& name) const override { return full_.contains_i(name); }

  std::vector<double> vals_r(const std::string& name) const override {
    if (name == count_name_) return {static_cast<double>(rows_.size())};
    if (row_vars_.count(name)) return gather(cached(cache_.r, name));
    return full_.vals_r(name);
  }
  std::vector<int> vals_i(const std::string& name) const override {
    if (name == count_name_) return {static_cast<int>(rows_.size())};
    if (row_vars_.count(name)) return gather(cached(cache_.i, name));
    return full_.vals_i(name);
  }
  std::vector<std::complex<double>> vals_c(const std::string& name) const override {
    if (!row_vars_.count(name)) return full_.vals_c(name);
    // Complex values are stored as reals with a trailing dimension 2 (real parts, then imaginary parts).
    std::vector<double> re_im = vals_r(name);
    std::vector<size_t> dims = dims_r(name);
    size_t half = re_im.size() / 2;
    std::vector<std::complex<double>> out(half);
    for (size_t k = 0; k < half; ++k) out[k] = {re_im[k], re_im[k + half]};
    (void)dims;
    return out;
  }
  std::vector<size_t> dims_r(const std::string& name) const override { return subset_dims(full_.dims_r(name), name); }
  std::vector<size_t> dims_i(const std::string& name) const override { return subset_dims(full_.dims_i(name), name); }
  void names_r(std::vector<std::string>& names) const override { full_.names_r(names); }
  void names_i(std::vector<std::string>& names) const override { full_.names_i(names); }

  void validate_dims(const std::string& stage, const std::string& name, const std::string& base_type,
                     const std::vector<size_t>& declared) const override {
    std::vector<size_t> found = dims_r(name);
    size_t n_found = found.empty() ? (contains_r(name) ? 1 : 0) : 1;
    for (size_t d : found) n_found *= d;
    size_t n_declared = 1;
    for (size_t d : declared) n_declared *= d;
    if (n_found == 0 && n_declared == 0) return;
    if (!contains_r(name)) throw std::runtime_error("variable does not exist; processing stage=" + stage +
                                                    "; variable name=" + name + "; base type=" + base_type);
    if (found != declared) {
      std::stringstream msg;
      msg << "mismatch in dimensions declared and found in context; processing stage=" << stage
          << "; variable name=" << name << "; dims declared=";
      dims_msg(msg, declared);
      msg << "; dims found=";
      dims_msg(msg, found);
      throw std::runtime_error(msg.str());
    }
    if (base_type == "int" && !contains_i(name))
      throw std::runtime_error("int variable contained non-int values; processing stage=" + stage +
                               "; variable name=" + name);
  }

 private:
  std::vector<size_t> subset_dims(std::vector<size_t> dims, const std::string& name) const {
    if (name == count_name_) return {};
    if (row_vars_.count(name) && !dims.empty()) dims[0] = rows_.size();
    return dims;
  }

  template <typename T>
  static const std::vector<T>& cached(const std::map<std::string, std::vector<T>>& values, const std::string& name) {
    static const std::vector<T> none;
    auto it = values.find(name);
    return it == values.end() ? none : it->second;
  }

  // Values are column-major, so element (i, j) of a variable with leading dimension N sits at i + N * j.
  template <typename T>
  std::vector<T> gather(const std::vector<T>& values) const {
    if (n_full_ == 0) return {};
    const size_t inner = values.size() / n_full_;
    const size_t n_sub = rows_.size();
    std::vector<T> out(n_sub * inner);
    for (size_t j = 0; j < inner; ++j)
      for (size_t k = 0; k < n_sub; ++k) out[k + n_sub * j] = values[rows_[k] + n_full_ * j];
    return out;
  }

  const stan::json::json_data& full_;
  const std::string& count_name_;
  const std::set<std::string>& row_vars_;
  const row_values& cache_;
  size_t n_full_;
  std::vector<size_t> rows_;
};

std::set<std::string> split_names(const char* csv) {
  std::set<std::string> names;
  if (csv == nullptr) return names;
  std::stringstream in(csv);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) names.insert(item);
  return names;
}

}  // namespace

struct sdp_rows {
  std::unique_ptr<stan::json::json_data> data;
  std::string count_name;
  std::set<std::string> row_vars;
  size_t n_rows = 0;
  int dim = 0;
  int threads = 1;
  std::unique_ptr<stan::model::model_base> prior;
  std::vector<std::unique_ptr<stan::model::model_base>> rows;
};

namespace {

// The calling thread's task arena for `threads` threads, kept between calls: building and tearing down an
// arena on every call cost more than a small minibatch of rows (2 threads were slower than 1 below ~300 rows).
tbb::task_arena& thread_arena(int threads) {
  static thread_local std::unique_ptr<tbb::task_arena> arena;
  if (!arena || arena->max_concurrency() != threads) arena.reset(new tbb::task_arena(threads));
  return *arena;
}

// Run body(k) for k in [0, n) on the handle's thread count; the first non-domain error is rethrown.
template <typename F>
void parallel_rows(const sdp_rows& h, int64_t n, F&& body) {
  std::mutex lock;
  std::string first_error;
  std::atomic<bool> failed(false);
  auto run_range = [&](const tbb::blocked_range<int64_t>& r) {
    for (int64_t k = r.begin(); k != r.end(); ++k) {
      if (failed.load(std::memory_order_relaxed)) return;
      try {
        body(k);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> guard(lock);
        if (!failed.exchange(true)) first_error = e.what();
      }
    }
  };
  if (h.threads <= 1 || n < 64) {
    run_range(tbb::blocked_range<int64_t>(0, n));
  } else {
    thread_arena(h.threads).execute([&]() { tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, 64), run_range); });
  }
  if (failed) throw std::runtime_error(first_error);
}

size_t resolve_row(const sdp_rows& h, const int64_t* idx, int64_t k) {
  if (idx == nullptr) return static_cast<size_t>(k);
  int64_t i = idx[k];
  if (i < 0 || static_cast<size_t>(i) >= h.n_rows)
    throw std::out_of_range("row index " + std::to_string(i) + " is outside [0, " + std::to_string(h.n_rows) + ")");
  return static_cast<size_t>(i);
}

constexpr double NEG_INF = -std::numeric_limits<double>::infinity();

}  // namespace

extern "C" {

// Build the prior instance and one instance per row from one JSON document. `count_name` is the row-count
// variable (e.g. "N"), `row_vars_csv` the comma-separated row variables (leading dimension N).
sdp_rows* sdp_rows_construct(const char* json, const char* count_name, const char* row_vars_csv,
                             unsigned int seed, int threads, char** error_msg) {
  std::unique_ptr<sdp_rows> h(new sdp_rows());
  int rc = stan_dp::guarded("sdp_rows_construct", error_msg, [&]() {
    h->data = stan_dp::parse_json_text(json == nullptr ? "{}" : json);
    h->count_name = count_name;
    h->row_vars = split_names(row_vars_csv);
    h->threads = threads < 1 ? 1 : threads;
    std::vector<int> count = h->data->vals_i(h->count_name);
    if (count.size() != 1 || count[0] < 0)
      throw std::invalid_argument("the row count '" + h->count_name + "' must be a non-negative int");
    h->n_rows = static_cast<size_t>(count[0]);
    for (const auto& name : h->row_vars) {
      std::vector<size_t> dims = h->data->dims_r(name);
      if (dims.empty() || dims[0] != h->n_rows)
        throw std::invalid_argument("row variable '" + name + "' does not have leading dimension " +
                                    h->count_name + " = " + std::to_string(h->n_rows));
    }
    row_values cache;  // only needed while the instances read their data
    for (const auto& name : h->row_vars) {
      cache.r[name] = h->data->vals_r(name);
      if (h->data->contains_i(name)) cache.i[name] = h->data->vals_i(name);
    }
    row_subset_context none(*h->data, h->count_name, h->row_vars, cache, h->n_rows, {});
    h->prior.reset(&new_model(none, seed, stan_dp::print_stream()));
    h->dim = static_cast<int>(h->prior->num_params_r());
    h->rows.resize(h->n_rows);
    sdp_rows& ref = *h;
    parallel_rows(ref, static_cast<int64_t>(h->n_rows), [&](int64_t k) {
      row_subset_context one(*ref.data, ref.count_name, ref.row_vars, cache, ref.n_rows,
                             {static_cast<size_t>(k)});
      ref.rows[k].reset(&new_model(one, seed, nullptr));
      if (static_cast<int>(ref.rows[k]->num_params_r()) != ref.dim)
        throw std::invalid_argument("the number of unconstrained parameters depends on the row count");
    });
    h->data.reset();  // every instance copied its data in its constructor; the parsed document is not used again
  });
  if (rc != 0) return nullptr;
  return h.release();
}

void sdp_rows_destruct(sdp_rows* h) { delete h; }

int64_t sdp_rows_count(const sdp_rows* h) { return static_cast<int64_t>(h->n_rows); }

int sdp_rows_dim(const sdp_rows* h) { return h->dim; }

void sdp_rows_set_threads(sdp_rows* h, int threads) { h->threads = threads < 1 ? 1 : threads; }

// Log prior (the N = 0 instance: Jacobian included, constants kept) and optionally its gradient.
// A parameter value outside the prior's support gives -inf (and a zero gradient), not an error.
int sdp_rows_log_prior(const sdp_rows* h, const double* theta, double* value, double* grad, char** error_msg) {
  return stan_dp::guarded("sdp_rows_log_prior", error_msg, [&]() {
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta, h->dim);
    try {
      if (grad == nullptr) {
        *value = h->prior->log_prob_jacobian(x, nullptr);
      } else {
        Eigen::VectorXd g;
        *value = stan_dp::log_density_with_gradient(*h->prior, false, true, x, g, nullptr);
        Eigen::Map<Eigen::VectorXd>(grad, h->dim) = g;
      }
    } catch (const std::domain_error&) {
      *value = NEG_INF;
      if (grad != nullptr) Eigen::Map<Eigen::VectorXd>(grad, h->dim).setZero();
    }
  });
}

// l_i(theta) for rows idx[0..n) (all rows when idx is NULL; then n must equal the row count).
// A row whose log density is undefined at theta (Stan domain error) gets -inf; a prior outside its
// support makes every row -inf.
int sdp_rows_log_lik(const sdp_rows* h, const double* theta, const int64_t* idx, int64_t n, double* out,
                     char** error_msg) {
  return stan_dp::guarded("sdp_rows_log_lik", error_msg, [&]() {
    if (idx == nullptr && static_cast<size_t>(n) != h->n_rows)
      throw std::invalid_argument("n must equal the row count when no row indices are given");
    const Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta, h->dim);
    double lp0;
    try {
      Eigen::VectorXd x0 = x;
      lp0 = h->prior->log_prob_jacobian(x0, nullptr);
    } catch (const std::domain_error&) {
      std::fill(out, out + n, NEG_INF);
      return;
    }
    parallel_rows(*h, n, [&](int64_t k) {
      const stan::model::model_base& row = *h->rows[resolve_row(*h, idx, k)];
      Eigen::VectorXd xk = x;
      try {
        out[k] = row.log_prob_jacobian(xk, nullptr) - lp0;
      } catch (const std::domain_error&) {
        out[k] = NEG_INF;
      } catch (const std::exception&) {
        // Any other error inside one row (e.g. a size mismatch in some theta region) gives NaN for that row,
        // which the mechanisms clip like any value; rethrowing would stop the run on a data-dependent event.
        out[k] = std::numeric_limits<double>::quiet_NaN();
      }
    });
  });
}

// Values (n) and gradients (n x dim, row-major) of l_i at theta. Rows with a domain error get -inf and a
// zero gradient.
int sdp_rows_log_lik_grad(const sdp_rows* h, const double* theta, const int64_t* idx, int64_t n, double* out,
                          double* grad_out, char** error_msg) {
  return stan_dp::guarded("sdp_rows_log_lik_grad", error_msg, [&]() {
    if (idx == nullptr && static_cast<size_t>(n) != h->n_rows)
      throw std::invalid_argument("n must equal the row count when no row indices are given");
    const int d = h->dim;
    const Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta, d);
    Eigen::Map<Eigen::Matrix<double, -1, -1, Eigen::RowMajor>> grads(grad_out, n, d);
    double lp0;
    Eigen::VectorXd g0;
    try {
      lp0 = stan_dp::log_density_with_gradient(*h->prior, false, true, x, g0, nullptr);
    } catch (const std::domain_error&) {
      std::fill(out, out + n, NEG_INF);
      grads.setZero();
      return;
    }
    parallel_rows(*h, n, [&](int64_t k) {
      const stan::model::model_base& row = *h->rows[resolve_row(*h, idx, k)];
      Eigen::VectorXd g;
      try {
        out[k] = stan_dp::log_density_with_gradient(row, false, true, x, g, nullptr) - lp0;
        grads.row(k) = (g - g0).transpose();
      } catch (const std::domain_error&) {
        out[k] = NEG_INF;
        grads.row(k).setZero();
      } catch (const std::exception&) {  // as in sdp_rows_log_lik: NaN value and gradient for this row
        out[k] = std::numeric_limits<double>::quiet_NaN();
        grads.row(k).setConstant(std::numeric_limits<double>::quiet_NaN());
      }
    });
  });
}

}  // extern "C"
