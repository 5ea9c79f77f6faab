// Shared pieces of the stan-dp native layer: the model handle behind the BridgeStan C API, error
// reporting through malloc'd messages, the print stream, data parsing and per-thread autodiff tapes.
//
// All package C++ is written against stan::model::model_base, so it is compiled once per toolchain and
// linked with each model's stanc output, which defines new_model().
#ifndef STAN_DP_NATIVE_COMMON_HPP
#define STAN_DP_NATIVE_COMMON_HPP

#include <stan/math.hpp>
#include <stan/model/model_base.hpp>
#include <stan/io/var_context.hpp>
#include <stan/io/json/json_data.hpp>
#include <stan/io/empty_var_context.hpp>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

// Defined by the stanc-generated code of each model.
stan::model::model_base& new_model(stan::io::var_context& data_context, unsigned int seed,
                                   std::ostream* msg_stream);

// Defined by each model's translation unit: a new instance of the model's row program (the program without the
// model block's data-free statements, see stan_dp/row_program.py), or nullptr when the library has none.
stan::model::model_base* sdp_new_row_program_model(stan::io::var_context& data_context, unsigned int seed,
                                                   std::ostream* msg_stream);

namespace stan_dp {

// The stream that receives Stan print() output and warnings (std::cout unless a callback is set).
std::ostream* print_stream();

// Write a malloc'd copy of `message` into *err when err is not NULL (BridgeStan's error convention).
inline void report_error(char** err, const std::string& message) {
  if (err == nullptr) return;
  char* copy = static_cast<char*>(std::malloc(message.size() + 1));
  if (copy == nullptr) return;
  std::memcpy(copy, message.c_str(), message.size() + 1);
  *err = copy;
}

// Make sure the calling thread has a reverse-mode autodiff tape (STAN_THREADS keeps one per thread).
inline void ensure_ad_tape() {
  static thread_local stan::math::ChainableStack tape;
  (void)tape;
}

// Run `body`; convert any exception into BridgeStan's error convention (message for `where`, return -1).
template <typename F>
int guarded(const char* where, char** error_msg, F&& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    report_error(error_msg, std::string("Error in ") + where + ": " + e.what());
  } catch (...) {
    report_error(error_msg, std::string("Unknown error in ") + where);
  }
  return -1;
}

// Parse model data: NULL or "" means no data; text whose first non-blank character is '{' is JSON;
// anything else is the path of a JSON file.
std::unique_ptr<stan::io::var_context> parse_data(const char* data);

// Parse JSON text (not a path).
std::unique_ptr<stan::json::json_data> parse_json_text(const std::string& text);

// Evaluate log density (propto, jacobian chosen at run time) with its gradient by reverse-mode autodiff.
double log_density_with_gradient(const stan::model::model_base& model, bool propto, bool jacobian,
                                 const Eigen::VectorXd& theta, Eigen::VectorXd& grad, std::ostream* msgs);

// Log density without gradient. propto=true still uses autodiff types so that only constants are dropped.
double log_density_value(const stan::model::model_base& model, bool propto, bool jacobian,
                         const Eigen::VectorXd& theta, std::ostream* msgs);

// The log prior of `prior` (an instance on no rows: Jacobian included, constants kept) at theta and, when grad is
// not NULL, its gradient. A parameter value outside the prior's support gives -inf (and a zero gradient), not an
// error. Shared by the per-row and the shard engines' C API.
inline void prior_log_density(const stan::model::model_base& prior, int dim, const double* theta, double* value,
                              double* grad) {
  Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta, dim);
  try {
    if (grad == nullptr) {
      *value = prior.log_prob_jacobian(x, nullptr);
    } else {
      Eigen::VectorXd g;
      *value = log_density_with_gradient(prior, false, true, x, g, nullptr);
      Eigen::Map<Eigen::VectorXd>(grad, dim) = g;
    }
  } catch (const std::domain_error&) {
    *value = -std::numeric_limits<double>::infinity();
    if (grad != nullptr) Eigen::Map<Eigen::VectorXd>(grad, dim).setZero();
  }
}

}  // namespace stan_dp

// The model object behind the BridgeStan C API (`bs_model*`).
struct bs_model {
  stan::model::model_base* model = nullptr;
  std::string name;
  std::string info;
  std::string param_names[4];  // index: include_tp + 2 * include_gq
  int param_counts[4] = {0, 0, 0, 0};
  std::string param_unc_names;
  int param_unc_count = 0;
  ~bs_model() { delete model; }
};

// BridgeStan's pseudo-random number generator handle (`bs_rng*`).
struct bs_rng {
  stan::rng_t rng;
  explicit bs_rng(unsigned int seed) : rng(stan::services::util::create_rng(seed, 0)) {}
};

#endif
