// The row API: per-row log-likelihoods l_i(theta) = lp_i(theta) - lp_0(theta) and their gradients for the
// private samplers, evaluated in parallel TBB threads into caller-owned buffers.
//
// Row instances are built from the model's row program when the library has one and the caller asks for it (the
// program without its data-free model statements, which cancel in the difference), else from the program itself.
// Either way l_i is computed without the Jacobian of the constraining transforms: it depends on theta alone and
// cancels too. The factorization check in Python compares sum_i l_i with the user's unchanged program.
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
  std::unique_ptr<stan::model::model_base> prior;  // the program on no rows: log p0(theta), with Jacobian
  std::unique_ptr<stan::model::model_base> row_base;  // the row program on no rows (when rows use it)
  const stan::model::model_base* base = nullptr;  // subtracted from each row: row_base, or else prior
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

// Rows per TBB task. Below two grains the call runs in the calling thread: dispatching costs more than it saves.
constexpr int64_t ROW_GRAIN = 64;

// Run body(begin, end) over [0, n) in contiguous ranges on the handle's thread count. Each range sets up its
// buffers once; errors inside a row are handled by the body (see evaluate_row), so nothing here throws.
template <typename F>
void parallel_ranges(const sdp_rows& h, int64_t n, F&& body) {
  if (h.threads <= 1 || n < 2 * ROW_GRAIN) {
    body(int64_t(0), n);
    return;
  }
  thread_arena(h.threads).execute([&]() {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, ROW_GRAIN),
                      [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
  });
}

// Check every row index before any row is evaluated (an out-of-range index is the caller's error).
void check_indices(const sdp_rows& h, const int64_t* idx, int64_t n) {
  if (idx == nullptr) {
    if (static_cast<size_t>(n) != h.n_rows)
      throw std::invalid_argument("n must equal the row count when no row indices are given");
    return;
  }
  if (n < 0) throw std::invalid_argument("the number of row indices must be non-negative");
  for (int64_t k = 0; k < n; ++k)
    if (idx[k] < 0 || static_cast<size_t>(idx[k]) >= h.n_rows)
      throw std::out_of_range("row index " + std::to_string(idx[k]) + " is outside [0, " +
                              std::to_string(h.n_rows) + ")");
}

inline const stan::model::model_base& row_model(const sdp_rows& h, const int64_t* idx, int64_t k) {
  return *h.rows[idx == nullptr ? static_cast<size_t>(k) : static_cast<size_t>(idx[k])];
}

constexpr double NEG_INF = -std::numeric_limits<double>::infinity();
constexpr double NOT_A_NUMBER = std::numeric_limits<double>::quiet_NaN();

// Evaluate one row. A Stan domain error (log density undefined at theta) gives -inf with a zero gradient, as
// Stan's samplers treat it; any other exception (a size mismatch, an index out of range, ...) gives NaN with a
// NaN gradient. Either way the call goes on: the failure of one row at one theta is a data-dependent event that
// must not stop a private run or reach the user as Stan's message (the mechanisms clip both).
template <typename F>
double evaluate_row(F&& body, double* grad, int dim) {
  try {
    return body();
  } catch (const std::domain_error&) {
    if (grad != nullptr) std::fill(grad, grad + dim, 0.0);
    return NEG_INF;
  } catch (...) {
    if (grad != nullptr) std::fill(grad, grad + dim, NOT_A_NUMBER);
    return NOT_A_NUMBER;
  }
}

}  // namespace

extern "C" {

// Build the prior instance and one instance per row from one JSON document. `count_name` is the row-count
// variable (e.g. "N"), `row_vars_csv` the comma-separated row variables (leading dimension N).
// With `use_row_program` non-zero the row instances come from the library's row program (an error if it has
// none); the caller must have checked that the program was derived for this row split.
sdp_rows* sdp_rows_construct(const char* json, const char* count_name, const char* row_vars_csv,
                             unsigned int seed, int threads, int use_row_program, char** error_msg) {
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
    auto make_row_model = [&](stan::io::var_context& context, std::ostream* msgs) -> stan::model::model_base* {
      if (!use_row_program) return &new_model(context, seed, msgs);
      stan::model::model_base* m = sdp_new_row_program_model(context, seed, msgs);
      if (m == nullptr) throw std::invalid_argument("this model library has no row program");
      return m;
    };
    row_subset_context none(*h->data, h->count_name, h->row_vars, cache, h->n_rows, {});
    h->prior.reset(&new_model(none, seed, stan_dp::print_stream()));
    h->dim = static_cast<int>(h->prior->num_params_r());
    if (use_row_program) {
      h->row_base.reset(make_row_model(none, nullptr));
      if (static_cast<int>(h->row_base->num_params_r()) != h->dim)
        throw std::invalid_argument("the row program has other parameters than the program");
    }
    h->base = use_row_program ? h->row_base.get() : h->prior.get();
    h->rows.resize(h->n_rows);
    sdp_rows& ref = *h;
    std::atomic<bool> sized_by_rows(false);
    std::mutex lock;
    std::string first_error;
    parallel_ranges(ref, static_cast<int64_t>(h->n_rows), [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        try {
          row_subset_context one(*ref.data, ref.count_name, ref.row_vars, cache, ref.n_rows,
                                 {static_cast<size_t>(k)});
          ref.rows[k].reset(make_row_model(one, nullptr));
          if (static_cast<int>(ref.rows[k]->num_params_r()) != ref.dim) sized_by_rows = true;
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> guard(lock);
          if (first_error.empty()) first_error = e.what();
        }
      }
    });
    if (sized_by_rows) throw std::invalid_argument("the number of unconstrained parameters depends on the row count");
    if (!first_error.empty()) throw std::runtime_error(first_error);
    h->data.reset();  // every instance copied its data in its constructor; the parsed document is not used again
  });
  if (rc != 0) return nullptr;
  return h.release();
}

void sdp_rows_destruct(sdp_rows* h) { delete h; }

int64_t sdp_rows_count(const sdp_rows* h) { return static_cast<int64_t>(h->n_rows); }

int sdp_rows_dim(const sdp_rows* h) { return h->dim; }

void sdp_rows_set_threads(sdp_rows* h, int threads) { h->threads = threads < 1 ? 1 : threads; }

// Log prior and optionally its gradient (stan_dp::prior_log_density, common.hpp).
int sdp_rows_log_prior(const sdp_rows* h, const double* theta, double* value, double* grad, char** error_msg) {
  return stan_dp::guarded("sdp_rows_log_prior", error_msg, [&]() {
    stan_dp::prior_log_density(*h->prior, h->dim, theta, value, grad);
  });
}

// l_i(theta) for rows idx[0..n) (all rows when idx is NULL; then n must equal the row count).
// A row whose log density is undefined at theta (Stan domain error) gets -inf, a row whose evaluation throws
// anything else gets NaN; a domain error on no rows (the data-free part) makes every row -inf.
int sdp_rows_log_lik(const sdp_rows* h, const double* theta, const int64_t* idx, int64_t n, double* out,
                     char** error_msg) {
  return stan_dp::guarded("sdp_rows_log_lik", error_msg, [&]() {
    check_indices(*h, idx, n);
    const Eigen::Map<const Eigen::VectorXd> x(theta, h->dim);
    double lp0;
    try {
      Eigen::VectorXd x0 = x;
      lp0 = h->base->log_prob(x0, nullptr);
    } catch (const std::domain_error&) {
      std::fill(out, out + n, NEG_INF);
      return;
    }
    parallel_ranges(*h, n, [&](int64_t begin, int64_t end) {
      Eigen::VectorXd xk = x;  // one copy per range: log_prob takes a non-const reference
      for (int64_t k = begin; k < end; ++k) {
        const stan::model::model_base& model = row_model(*h, idx, k);
        out[k] = evaluate_row([&]() { return model.log_prob(xk, nullptr) - lp0; }, nullptr, 0);
      }
    });
  });
}

// Values (n) and gradients (n x dim, row-major) of l_i at theta. Rows with a domain error get -inf and a
// zero gradient; rows whose evaluation throws anything else get NaN and a NaN gradient.
int sdp_rows_log_lik_grad(const sdp_rows* h, const double* theta, const int64_t* idx, int64_t n, double* out,
                          double* grad_out, char** error_msg) {
  return stan_dp::guarded("sdp_rows_log_lik_grad", error_msg, [&]() {
    check_indices(*h, idx, n);
    const int d = h->dim;
    const Eigen::Map<const Eigen::VectorXd> x(theta, d);
    double lp0;
    Eigen::VectorXd g0;
    try {
      lp0 = stan_dp::log_density_with_gradient(*h->base, false, false, x, g0, nullptr);
    } catch (const std::domain_error&) {
      std::fill(out, out + n, NEG_INF);
      std::fill(grad_out, grad_out + n * d, 0.0);
      return;
    }
    parallel_ranges(*h, n, [&](int64_t begin, int64_t end) {
      stan_dp::ensure_ad_tape();
      // theta's autodiff variables are made once per range, on a tape nested around the range; each row runs on
      // its own nested tape, whose reverse pass leaves grad l_i in their adjoints, which are then reset.
      stan::math::nested_rev_autodiff range_tape;
      Eigen::Matrix<stan::math::var, -1, 1> xv(d);
      for (int j = 0; j < d; ++j) xv.coeffRef(j) = stan::math::var(x.coeff(j));
      for (int64_t k = begin; k < end; ++k) {
        const stan::model::model_base& model = row_model(*h, idx, k);
        double* g = grad_out + k * d;
        out[k] = evaluate_row(
            [&]() {
              stan::math::nested_rev_autodiff row_tape;
              stan::math::var lp = model.log_prob(xv, nullptr);
              lp.grad();
              for (int j = 0; j < d; ++j) g[j] = xv.coeff(j).adj() - g0.coeff(j);
              return lp.val() - lp0;
            },
            g, d);
        for (int j = 0; j < d; ++j) xv.coeffRef(j).adj() = 0.0;
      }
    });
  });
}

}  // extern "C"
