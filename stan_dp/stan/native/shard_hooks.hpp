// The row loop of a shard program (see stan_dp/shard_program.py): the per-row terms of a shard's rows, evaluated
// inside one log density evaluation of the shard program.
//
// The shard program is the user's program with its row-dependent model statements moved into a Stan function
// `sdp_row_lp(int sdp_i, <free variables>)` and replaced by one call of an external function
// `sdp_shard_rows(<free variables>)`. Everything else of the program (parameter transforms, transformed
// parameters, data-free model statements) therefore runs once per evaluation, not once per row. The external
// function is defined in each model's translation unit as a call of `run_rows` below, which evaluates
// sdp_row_lp for the rows of the current request (`current_call()`, set by the driver in shards.cpp).
//
// Values (double arguments): each row's terms are summed in a small accumulator.
// Gradients (var arguments): every row is recorded on the shard's autodiff stack after the data-free part
// (theta, the parameter transforms, ...). A row's gradient is its own reverse sweep over the part of the stack
// that the row recorded, which stops at the "boundary": the autodiff variables the row function received as
// arguments. Their adjoints are mapped to the gradient in theta directly (a boundary variable that is a
// component of theta) or through the Jacobian of the data-free part (computed once per evaluation, one sweep
// per boundary variable that is not a component of theta). No row ever sweeps the data-free part.
//
// Errors: a row whose evaluation throws std::domain_error gets status DOMAIN (-inf, zero gradient), any other
// exception status OTHER (NaN, NaN gradient); the loop goes on with the next row, and no message is kept.
#ifndef STAN_DP_NATIVE_SHARD_HOOKS_HPP
#define STAN_DP_NATIVE_SHARD_HOOKS_HPP

#include <stan/math.hpp>

#include <complex>
#include <deque>
#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace stan_dp {
namespace shard {

enum row_status : unsigned char { ROW_OK = 0, ROW_DOMAIN = 1, ROW_OTHER = 2 };

// What a per-row kernel (shard_kernels.hpp) prepared from its data-free argument, for one request.
struct site_slot {
  bool ready = false;
  bool failed = false;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> a, b;
  double constant = 0.0;
  // Direct gradients: the kernel's autodiff operands, when all of them are boundary elements of the row loop
  // (data-free arguments), and the boundary element of each.
  int direct = 0;  // 0: not known yet, 1: operand k is the boundary element map[k], -1: not direct
  std::vector<int> map;
  std::vector<int> theta;  // the theta component of each operand (-1: through the Jacobian)
  bool all_theta = false;
  // Values of a data-free autodiff argument, read once per evaluation (0: not yet, 1: read, -1: failed a check).
  int cached = 0;
  std::vector<double> values;
};

// A component of a boundary argument: where its adjoint lives, and how it maps to theta.
struct boundary_element {
  double* adj;
  int theta = -1;     // >= 0: this is component `theta` of theta itself
  int64_t row = -1;   // else: its row in the Jacobian of the data-free part
};

// One request to a shard, set up by the driver for the duration of one log density evaluation.
struct call {
  const int64_t* rows = nullptr;  // global row indices (nullptr: the contiguous rows first, first + 1, ...)
  int64_t first = 0;              // first global row when rows == nullptr
  int64_t n = 0;                  // number of requested rows
  int64_t offset = 0;             // global index of the shard's first row
  double* values = nullptr;       // n values, zero on entry; the row terms are added
  double* grads = nullptr;        // n x dim (row-major), zero on entry, or nullptr for values only
  unsigned char* status = nullptr;  // n statuses, ROW_OK on entry
  int dim = 0;
  stan::math::vari** theta = nullptr;  // gradient mode: the dim autodiff variables of theta
  size_t stack_begin = 0;         // var stack size before the data-free part (right after theta was made)
  size_t nochain_begin = 0;       // the same for the no-chain stack
  int hooks = 0;                  // row loops run in this evaluation (the program has exactly one)
  // Gradient mode, inside the row loop: the current row's gradient and the boundary (see direct_map).
  double* row_grad = nullptr;
  const boundary_element* boundary = nullptr;
  size_t n_boundary = 0;
  const double* jacobian = nullptr;
  std::deque<site_slot> sites;    // per-row kernels' prepared arguments, by call site (references stay valid)

  // Slot `id` of a call site (> 0); -id is the site's second slot (a cached argument).
  site_slot& site(int id) {
    const size_t k = id >= 0 ? 2 * static_cast<size_t>(id) : 2 * static_cast<size_t>(-id) + 1;
    if (k >= sites.size()) sites.resize(k + 1);
    return sites[k];
  }

  // 1-based index of the k-th requested row within the shard (Stan indexing).
  int local_index(int64_t k) const {
    return static_cast<int>((rows == nullptr ? first + k : rows[k]) - offset + 1);
  }
};

// The calling thread's current request (defined in shards.cpp; nullptr outside an evaluation).
call*& current_call();

// Rows recorded on one nested autodiff stack before its memory is recovered.
constexpr int64_t ROWS_PER_TAPE = 256;

// The target accumulator handed to sdp_row_lp: the sum of the row's terms, without heap allocation.
template <typename T>
struct row_accumulator {
  T total{};
  bool used = false;

  template <typename S, stan::require_stan_scalar_t<S>* = nullptr>
  void add(const S& x) {
    if (used) {
      total = total + x;
    } else {
      total = x;
      used = true;
    }
  }
  template <typename S, stan::require_not_stan_scalar_t<S>* = nullptr>
  void add(const S& x) {
    add(stan::math::sum(x));
  }
  T sum() const { return used ? total : T(0.0); }
};

// Collect the adjoint slots of every autodiff variable in a (possibly nested) argument.
inline void collect(std::vector<double*>& out, const stan::math::var& v) {
  if (v.vi_ != nullptr) out.push_back(&v.vi_->adj_);
}
template <typename T, stan::require_arithmetic_t<T>* = nullptr>
inline void collect(std::vector<double*>&, const T&) {}
inline void collect(std::vector<double*>&, const std::string&) {}
template <typename T>
inline void collect(std::vector<double*>& out, const std::complex<T>& z) {
  collect(out, z.real());
  collect(out, z.imag());
}
template <typename T, stan::require_eigen_t<T>* = nullptr>
inline void collect(std::vector<double*>& out, const T& m) {
  using scalar = stan::value_type_t<T>;
  if constexpr (!std::is_arithmetic<scalar>::value) {
    for (Eigen::Index k = 0; k < m.size(); ++k) collect(out, m.coeff(k));
  }
}
template <typename T, stan::require_var_matrix_t<T>* = nullptr>
inline void collect(std::vector<double*>& out, const T& m) {
  for (Eigen::Index k = 0; k < m.vi_->adj_.size(); ++k) out.push_back(&m.vi_->adj_.coeffRef(k));
}
template <typename T>
inline void collect(std::vector<double*>& out, const std::vector<T>& v) {
  for (const auto& x : v) collect(out, x);
}
template <typename... T>
inline void collect(std::vector<double*>& out, const std::tuple<T...>& t) {
  std::apply([&](const auto&... x) { (collect(out, x), ...); }, t);
}

// Zero the adjoints of theta and of everything recorded since the data-free part began.
inline void zero_outer_adjoints(const call& c) {
  auto& stack = stan::math::ChainableStack::instance_->var_stack_;
  auto& nochain = stan::math::ChainableStack::instance_->var_nochain_stack_;
  for (int j = 0; j < c.dim; ++j) c.theta[j]->set_zero_adjoint();
  for (size_t s = c.stack_begin; s < stack.size(); ++s) stack[s]->set_zero_adjoint();
  for (size_t s = c.nochain_begin; s < nochain.size(); ++s) nochain[s]->set_zero_adjoint();
}

// Direct gradients for a per-row kernel whose value enters the target with coefficient 1 (the rewrite emits kernels
// only as `target += kernel(...)`) and whose autodiff operands are data-free arguments, hence the same variables
// for every row of the loop (the rewrite guarantees both): the kernel maps its operands to boundary elements once
// per evaluation (direct_map) and then adds each row's partials to that row's gradient itself (direct_add),
// through the Jacobian for elements that are not theta, instead of recording a node for the row's sweep.
inline bool direct_map(call* c, site_slot& s, stan::math::vari* const* operands, int n) {
  if (s.direct != 0) return s.direct == 1;
  s.direct = -1;
  if (c == nullptr || c->boundary == nullptr) return false;
  s.map.assign(n, -1);
  for (int k = 0; k < n; ++k) {
    for (size_t e = 0; e < c->n_boundary && s.map[k] < 0; ++e)
      if (c->boundary[e].adj == &operands[k]->adj_) s.map[k] = static_cast<int>(e);
    if (s.map[k] < 0) return false;
  }
  s.all_theta = true;
  s.theta.assign(n, -1);
  for (int k = 0; k < n; ++k) {
    s.theta[k] = c->boundary[s.map[k]].theta;
    if (s.theta[k] < 0) s.all_theta = false;
  }
  s.direct = 1;
  return true;
}

inline void direct_add(const call* c, const site_slot& s, const double* partials, int n) {
  double* g = c->row_grad;
  if (s.all_theta) {
    const int* theta = s.theta.data();
    for (int k = 0; k < n; ++k) g[theta[k]] += partials[k];
    return;
  }
  const int d = c->dim;
  for (int k = 0; k < n; ++k) {
    const boundary_element& e = c->boundary[s.map[k]];
    if (e.theta >= 0) {
      g[e.theta] += partials[k];
    } else {
      const double* jrow = c->jacobian + e.row * d;
      for (int j = 0; j < d; ++j) g[j] += partials[k] * jrow[j];
    }
  }
}

// Prefetching the data of requested rows a few rows ahead. A request for scattered rows (a minibatch) reads
// each row's entries from memory the caches do not hold (a column-major matrix keeps a row's entries in as many
// places as it has columns), and the row loop would wait for every one of them. The loop therefore asks the
// processor to fetch the entries of the row PREFETCH_AHEAD requests ahead, in each data argument of the row
// function that holds one entry (or one row) per row of the shard: a dense Eigen vector or matrix of numbers, or
// an array of numbers. Arguments of other shapes, autodiff arguments and rows beyond an argument's size are
// left alone. A prefetch changes no value: it only moves memory into the cache earlier.
constexpr int64_t PREFETCH_AHEAD = 8;
constexpr Eigen::Index PREFETCH_COLUMNS = 64;

// On x86-64 an asm statement: GCC 12 at -O3 silently dropped every __builtin_prefetch of a row loop whose
// arguments mixed an Eigen matrix and an array (seen in the disassembly), and a volatile asm cannot be dropped.
inline void prefetch_address(const void* p) {
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
  asm volatile("prefetcht2 %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 1);
#else
  (void)p;
#endif
}

// Row `i` (0-based, within the shard) of one argument.
template <typename T>
inline void prefetch_row(const T& a, int64_t i) {
  if constexpr (stan::is_eigen<T>::value) {
    using scalar = typename T::Scalar;
    constexpr bool direct = (Eigen::internal::traits<T>::Flags & Eigen::DirectAccessBit) != 0;
    if constexpr (std::is_arithmetic<scalar>::value && direct) {
      if (i < 0 || i >= a.rows()) return;
      const scalar* start = a.data();
      if (T::IsRowMajor) {
        prefetch_address(start + i * a.outerStride());
        return;
      }
      const Eigen::Index columns = a.cols() < PREFETCH_COLUMNS ? a.cols() : PREFETCH_COLUMNS;
      for (Eigen::Index j = 0; j < columns; ++j) prefetch_address(start + i * a.innerStride() + j * a.outerStride());
    }
  } else if constexpr (stan::is_std_vector<T>::value) {
    if constexpr (std::is_arithmetic<typename T::value_type>::value) {
      if (i >= 0 && i < static_cast<int64_t>(a.size())) prefetch_address(a.data() + i);
    }
  }
}

// The data of the k-th requested row, in every argument (only for scattered rows: contiguous rows are streamed by
// the processor's own prefetcher).
template <typename... Args>
inline void prefetch_request(const call& c, int64_t k, const Args&... args) {
  if (c.rows == nullptr || k >= c.n) return;
  const int64_t i = c.local_index(k) - 1;
  (prefetch_row(args, i), ...);
}

template <typename F, typename... Args>
void value_rows(call& c, F&& body, const Args&... args) {
  double lp = 0.0;
  for (int64_t k = 0; k < c.n; ++k) {
    prefetch_request(c, k + PREFETCH_AHEAD, args...);
    if (c.status[k] != ROW_OK) continue;
    try {
      row_accumulator<double> acc;
      body(c.local_index(k), lp, acc);
      c.values[k] += acc.sum();
    } catch (const std::domain_error&) {
      c.status[k] = ROW_DOMAIN;
    } catch (...) {
      c.status[k] = ROW_OTHER;
    }
  }
}

template <typename F, typename... Args>
void gradient_rows(call& c, F&& body, const Args&... args) {
  using stan::math::var;
  auto& stack = stan::math::ChainableStack::instance_->var_stack_;
  auto& nochain = stan::math::ChainableStack::instance_->var_nochain_stack_;
  const int d = c.dim;
  // The boundary and the Jacobian of the data-free part for the boundary elements that are not theta.
  std::vector<double*> slots;
  (collect(slots, args), ...);
  std::vector<boundary_element> boundary;
  boundary.reserve(slots.size());
  std::vector<double> jacobian;  // one row of d entries per non-theta element
  std::unordered_map<const double*, int> theta_index;  // for many components; a short scan otherwise
  constexpr int SCAN = 32;
  if (d > SCAN)
    for (int j = 0; j < d; ++j) theta_index.emplace(&c.theta[j]->adj_, j);
  for (double* adj : slots) {
    boundary_element e{adj};
    if (d > SCAN) {
      auto found = theta_index.find(adj);
      if (found != theta_index.end()) e.theta = found->second;
    } else {
      for (int j = 0; j < d && e.theta < 0; ++j)
        if (&c.theta[j]->adj_ == adj) e.theta = j;
    }
    if (e.theta < 0) {
      e.row = static_cast<int64_t>(jacobian.size() / d);
      zero_outer_adjoints(c);
      *adj = 1.0;
      for (size_t s = stack.size(); s-- > c.stack_begin;) stack[s]->chain();
      for (int j = 0; j < d; ++j) jacobian.push_back(c.theta[j]->adj_);
    }
    boundary.push_back(e);
  }
  zero_outer_adjoints(c);
  c.boundary = boundary.data();
  c.n_boundary = boundary.size();
  c.jacobian = jacobian.data();
  struct leave_rows {
    call& c;
    ~leave_rows() { c.row_grad = nullptr; c.boundary = nullptr; c.n_boundary = 0; c.jacobian = nullptr; }
  } leave{c};
  var lp(0.0);
  stan::math::start_nested();
  int64_t recorded = 0;
  for (int64_t k = 0; k < c.n; ++k) {
    prefetch_request(c, k + PREFETCH_AHEAD, args...);
    if (c.status[k] != ROW_OK) continue;
    if (recorded == ROWS_PER_TAPE) {
      stan::math::recover_memory_nested();
      stan::math::start_nested();
      recorded = 0;
    }
    ++recorded;
    const size_t mark = stack.size();
    const size_t nochain_mark = nochain.size();
    c.row_grad = c.grads + k * d;
    try {
      row_accumulator<var> acc;
      body(c.local_index(k), lp, acc);
      var term = acc.sum();
      c.values[k] += term.val();
      // Nothing recorded for the sweep and the term a constant made in this row (a kernel with direct
      // gradients): the row's gradient is already written.
      const bool direct = stack.size() == mark && nochain.size() > nochain_mark && nochain.back() == term.vi_;
      if (c.grads != nullptr && !direct) {
        double* g = c.grads + k * d;
        term.vi_->adj_ += 1.0;
        for (size_t s = stack.size(); s-- > mark;) stack[s]->chain();
        for (const boundary_element& e : boundary) {
          const double a = *e.adj;
          if (a == 0.0) continue;
          *e.adj = 0.0;
          if (e.theta >= 0) {
            g[e.theta] += a;
          } else {
            const double* jrow = jacobian.data() + e.row * d;
            for (int j = 0; j < d; ++j) g[j] += a * jrow[j];
          }
        }
        // A term that is itself a variable recorded before this row (e.g. `target += sigma`) received the
        // seed directly: its slot was read above if it is a boundary element; it is cleared in any case.
        term.vi_->adj_ = 0.0;
      }
    } catch (const std::domain_error&) {
      c.status[k] = ROW_DOMAIN;
    } catch (...) {
      c.status[k] = ROW_OTHER;
    }
    c.row_grad = nullptr;
  }
  stan::math::recover_memory_nested();
}

// The body of a shard program's `sdp_shard_rows`: evaluate the row function for every requested row.
// `body(sdp_i, lp, accumulator)` calls sdp_row_lp for the 1-based local row sdp_i.
template <typename F, typename... Args>
void run_rows(F&& body, const Args&... args) {
  call* c = current_call();
  if (c == nullptr) throw std::logic_error("the shard row loop ran outside a shard evaluation");
  if (++c->hooks > 1) throw std::logic_error("the shard row loop ran twice in one evaluation");
  using scalar = stan::return_type_t<Args...>;
  if constexpr (std::is_same<scalar, double>::value) {
    value_rows(*c, body, args...);
  } else {
    static_assert(std::is_same<scalar, stan::math::var>::value, "shard rows support double and var");
    gradient_rows(*c, body, args...);
  }
}

}  // namespace shard
}  // namespace stan_dp

#endif
