// The BridgeStan C API (the symbols that bridgestan 2.9's Python model.py loads), implemented from the
// public API documentation against stan::model::model_base. Conventions:
//  * functions returning int give 0 on success and -1 on error; on error, when `error_msg` is not NULL,
//    *error_msg receives a malloc'd message that the caller frees with bs_free_error_msg;
//  * names are comma-separated, indices dot-separated and 1-based (Stan's own naming);
//  * propto = true drops only constants, so it is evaluated with autodiff types.
#include "common.hpp"

#include <stan/io/chained_var_context.hpp>
#include <stan/io/random_var_context.hpp>
#include <stan/services/util/create_rng.hpp>
#include <stan/version.hpp>

#include <cmath>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <streambuf>

namespace stan_dp {

namespace {

// A stream buffer forwarding text to a user callback (set by bs_set_print_callback).
typedef void (*print_callback_t)(const char* data, size_t size);

class callback_buffer : public std::streambuf {
 public:
  explicit callback_buffer(print_callback_t cb) : callback_(cb) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    callback_(s, static_cast<size_t>(n));
    return n;
  }
  int_type overflow(int_type ch) override {
    if (ch != traits_type::eof()) {
      char c = static_cast<char>(ch);
      callback_(&c, 1);
    }
    return ch;
  }

 private:
  print_callback_t callback_;
};

std::ostream* current_stream = &std::cout;
std::unique_ptr<callback_buffer> current_buffer;
std::unique_ptr<std::ostream> current_callback_stream;

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
  }
  return out;
}

}  // namespace

std::ostream* print_stream() { return current_stream; }

void set_print_callback(print_callback_t cb) {
  if (cb == nullptr) {
    current_stream = &std::cout;
    return;
  }
  current_buffer = std::make_unique<callback_buffer>(cb);
  current_callback_stream = std::make_unique<std::ostream>(current_buffer.get());
  current_stream = current_callback_stream.get();
}

std::unique_ptr<stan::json::json_data> parse_json_text(const std::string& text) {
  std::stringstream in(text);
  return std::make_unique<stan::json::json_data>(in);
}

std::unique_ptr<stan::io::var_context> parse_data(const char* data) {
  if (data == nullptr) return std::make_unique<stan::io::empty_var_context>();
  std::string text(data);
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return std::make_unique<stan::io::empty_var_context>();
  if (text[first] != '{') {
    std::ifstream file(text);
    if (!file) throw std::invalid_argument("could not open data file '" + text + "'");
    std::stringstream buffer;
    buffer << file.rdbuf();
    text = buffer.str();
  }
  return parse_json_text(text);
}

double log_density_with_gradient(const stan::model::model_base& model, bool propto, bool jacobian,
                                 const Eigen::VectorXd& theta, Eigen::VectorXd& grad, std::ostream* msgs) {
  ensure_ad_tape();
  stan::math::nested_rev_autodiff nested;
  Eigen::Matrix<stan::math::var, -1, 1> x = theta.template cast<stan::math::var>();
  stan::math::var lp;
  if (propto && jacobian)
    lp = model.log_prob_propto_jacobian(x, msgs);
  else if (propto)
    lp = model.log_prob_propto(x, msgs);
  else if (jacobian)
    lp = model.log_prob_jacobian(x, msgs);
  else
    lp = model.log_prob(x, msgs);
  lp.grad();
  grad = x.adj();
  return lp.val();
}

double log_density_value(const stan::model::model_base& model, bool propto, bool jacobian,
                         const Eigen::VectorXd& theta, std::ostream* msgs) {
  if (propto) {
    Eigen::VectorXd unused;
    return log_density_with_gradient(model, propto, jacobian, theta, unused, msgs);
  }
  Eigen::VectorXd x = theta;
  return jacobian ? model.log_prob_jacobian(x, msgs) : model.log_prob(x, msgs);
}

}  // namespace stan_dp

namespace {

Eigen::VectorXd to_vector(const double* data, int n) {
  return Eigen::Map<const Eigen::VectorXd>(data, n);
}

// Hessian by central finite differences of autodiff gradients, symmetrised.
void finite_diff_hessian(const stan::model::model_base& model, bool propto, bool jacobian,
                         const Eigen::VectorXd& theta, double* lp, double* grad, double* hessian) {
  const int n = theta.size();
  Eigen::VectorXd g;
  *lp = stan_dp::log_density_with_gradient(model, propto, jacobian, theta, g, stan_dp::print_stream());
  if (grad != nullptr) Eigen::Map<Eigen::VectorXd>(grad, n) = g;
  Eigen::MatrixXd h(n, n);
  Eigen::VectorXd gp, gm;
  for (int i = 0; i < n; ++i) {
    double step = std::cbrt(std::numeric_limits<double>::epsilon()) * std::max(1.0, std::fabs(theta(i)));
    Eigen::VectorXd xp = theta, xm = theta;
    xp(i) += step;
    xm(i) -= step;
    stan_dp::log_density_with_gradient(model, propto, jacobian, xp, gp, nullptr);
    stan_dp::log_density_with_gradient(model, propto, jacobian, xm, gm, nullptr);
    h.col(i) = (gp - gm) / (2 * step);
  }
  Eigen::Map<Eigen::Matrix<double, -1, -1, Eigen::RowMajor>>(hessian, n, n) = 0.5 * (h + h.transpose());
}

}  // namespace

extern "C" {

int bs_major_version = 2;
int bs_minor_version = 9;
int bs_patch_version = 0;

bs_model* bs_model_construct(const char* data, unsigned int seed, char** error_msg) {
  std::unique_ptr<bs_model> handle(new bs_model());
  int rc = stan_dp::guarded("bs_model_construct", error_msg, [&]() {
    auto context = stan_dp::parse_data(data);
    handle->model = &new_model(*context, seed, stan_dp::print_stream());
    const stan::model::model_base& m = *handle->model;
    handle->name = m.model_name();
    for (int gq = 0; gq < 2; ++gq)
      for (int tp = 0; tp < 2; ++tp) {
        std::vector<std::string> names;
        m.constrained_param_names(names, tp, gq);
        handle->param_names[tp + 2 * gq] = stan_dp::join(names);
        handle->param_counts[tp + 2 * gq] = static_cast<int>(names.size());
      }
    std::vector<std::string> unc;
    m.unconstrained_param_names(unc, false, false);
    handle->param_unc_names = stan_dp::join(unc);
    handle->param_unc_count = static_cast<int>(m.num_params_r());
    std::ostringstream info;
    info << "BridgeStan version: 2.9.0 (C API implemented by stan-dp)\n"
         << "Stan version: " << stan::MAJOR_VERSION << "." << stan::MINOR_VERSION << "."
         << stan::PATCH_VERSION << "\n"
         << "Stan C++ Defines:\n\tSTAN_THREADS=true\n\tSTAN_MPI=false\n\tSTAN_OPENCL=false\n"
         << "\tSTAN_NO_RANGE_CHECKS=false\n\tSTAN_CPP_OPTIMS=false\n"
         << "Stan Compiler Details:\n";
    for (const auto& line : m.model_compile_info()) info << "\t" << line << "\n";
    handle->info = info.str();
  });
  if (rc != 0) return nullptr;
  return handle.release();
}

void bs_model_destruct(bs_model* m) { delete m; }

void bs_free_error_msg(char* error_msg) { std::free(error_msg); }

int bs_set_print_callback(void (*callback)(const char*, size_t), char** error_msg) {
  return stan_dp::guarded("bs_set_print_callback", error_msg, [&]() { stan_dp::set_print_callback(callback); });
}

const char* bs_name(const bs_model* m) { return m->name.c_str(); }

const char* bs_model_info(const bs_model* m) { return m->info.c_str(); }

const char* bs_param_names(const bs_model* m, bool include_tp, bool include_gq) {
  return m->param_names[include_tp + 2 * include_gq].c_str();
}

const char* bs_param_unc_names(const bs_model* m) { return m->param_unc_names.c_str(); }

int bs_param_num(const bs_model* m, bool include_tp, bool include_gq) {
  return m->param_counts[include_tp + 2 * include_gq];
}

int bs_param_unc_num(const bs_model* m) { return m->param_unc_count; }

int bs_param_constrain(const bs_model* m, bool include_tp, bool include_gq, const double* theta_unc,
                       double* theta, bs_rng* rng, char** error_msg) {
  return stan_dp::guarded("bs_param_constrain", error_msg, [&]() {
    if (include_gq && rng == nullptr)
      throw std::invalid_argument("an RNG (bs_rng) is required when include_gq is true");
    Eigen::VectorXd unc = to_vector(theta_unc, m->param_unc_count);
    Eigen::VectorXd out;
    if (rng != nullptr) {
      m->model->write_array(rng->rng, unc, out, include_tp, include_gq, stan_dp::print_stream());
    } else {
      stan::rng_t unused = stan::services::util::create_rng(0, 0);  // not drawn from without gq
      m->model->write_array(unused, unc, out, include_tp, include_gq, stan_dp::print_stream());
    }
    const int expected = m->param_counts[include_tp + 2 * include_gq];
    if (out.size() != expected)
      throw std::runtime_error("write_array returned " + std::to_string(out.size()) + " values, expected " +
                               std::to_string(expected));
    std::copy(out.data(), out.data() + expected, theta);
  });
}

int bs_param_unconstrain(const bs_model* m, const double* theta, double* theta_unc, char** error_msg) {
  return stan_dp::guarded("bs_param_unconstrain", error_msg, [&]() {
    Eigen::VectorXd constrained = to_vector(theta, m->param_counts[0]);
    Eigen::VectorXd unc(m->param_unc_count);
    m->model->unconstrain_array(constrained, unc, stan_dp::print_stream());
    std::copy(unc.data(), unc.data() + m->param_unc_count, theta_unc);
  });
}

int bs_param_unconstrain_json(const bs_model* m, const char* json, double* theta_unc, char** error_msg) {
  return stan_dp::guarded("bs_param_unconstrain_json", error_msg, [&]() {
    auto context = stan_dp::parse_json_text(json == nullptr ? "{}" : json);
    Eigen::VectorXd unc(m->param_unc_count);
    m->model->transform_inits(*context, unc, stan_dp::print_stream());
    std::copy(unc.data(), unc.data() + m->param_unc_count, theta_unc);
  });
}

int bs_param_initialize(const bs_model* m, const char* init_json, bs_rng* rng, double init_radius,
                        int max_tries, bool jacobian, double* theta_unc, char** error_msg) {
  return stan_dp::guarded("bs_param_initialize", error_msg, [&]() {
    if (rng == nullptr) throw std::invalid_argument("an RNG (bs_rng) is required");
    if (max_tries < 1) throw std::invalid_argument("max_tries must be at least 1");
    std::unique_ptr<stan::io::var_context> given;
    if (init_json != nullptr && std::strlen(init_json) > 0)
      given = stan_dp::parse_json_text(init_json);
    else
      given = std::make_unique<stan::io::empty_var_context>();
    std::string last_problem = "no attempt made";
    for (int attempt = 0; attempt < max_tries; ++attempt) {
      try {
        stan::io::random_var_context random(*m->model, rng->rng, init_radius, init_radius == 0);
        stan::io::chained_var_context context(*given, random);
        Eigen::VectorXd unc(m->param_unc_count);
        m->model->transform_inits(context, unc, stan_dp::print_stream());
        Eigen::VectorXd grad;
        double lp = stan_dp::log_density_with_gradient(*m->model, true, jacobian, unc, grad, nullptr);
        if (std::isfinite(lp) && grad.allFinite()) {
          std::copy(unc.data(), unc.data() + m->param_unc_count, theta_unc);
          return;
        }
        last_problem = "log density or its gradient is not finite";
      } catch (const std::domain_error& e) {
        last_problem = e.what();
      }
    }
    throw std::domain_error("no initial point with finite log density and gradient found after " +
                            std::to_string(max_tries) + " attempts; last problem: " + last_problem);
  });
}

int bs_log_density(const bs_model* m, bool propto, bool jacobian, const double* theta_unc, double* lp,
                   char** error_msg) {
  return stan_dp::guarded("bs_log_density", error_msg, [&]() {
    *lp = stan_dp::log_density_value(*m->model, propto, jacobian, to_vector(theta_unc, m->param_unc_count),
                                     stan_dp::print_stream());
  });
}

int bs_log_density_gradient(const bs_model* m, bool propto, bool jacobian, const double* theta_unc,
                            double* lp, double* grad, char** error_msg) {
  return stan_dp::guarded("bs_log_density_gradient", error_msg, [&]() {
    Eigen::VectorXd g;
    *lp = stan_dp::log_density_with_gradient(*m->model, propto, jacobian,
                                             to_vector(theta_unc, m->param_unc_count), g,
                                             stan_dp::print_stream());
    std::copy(g.data(), g.data() + g.size(), grad);
  });
}

int bs_log_density_hessian(const bs_model* m, bool propto, bool jacobian, const double* theta_unc,
                           double* lp, double* grad, double* hessian, char** error_msg) {
  return stan_dp::guarded("bs_log_density_hessian", error_msg, [&]() {
    finite_diff_hessian(*m->model, propto, jacobian, to_vector(theta_unc, m->param_unc_count), lp, grad,
                        hessian);
  });
}

int bs_log_density_hessian_vector_product(const bs_model* m, bool propto, bool jacobian,
                                          const double* theta_unc, const double* vector, double* lp,
                                          double* hvp, char** error_msg) {
  return stan_dp::guarded("bs_log_density_hessian_vector_product", error_msg, [&]() {
    const int n = m->param_unc_count;
    Eigen::VectorXd x = to_vector(theta_unc, n);
    Eigen::VectorXd v = to_vector(vector, n);
    Eigen::VectorXd g, gp, gm;
    *lp = stan_dp::log_density_with_gradient(*m->model, propto, jacobian, x, g, stan_dp::print_stream());
    const double norm = v.norm();
    if (norm == 0) {
      Eigen::Map<Eigen::VectorXd>(hvp, n).setZero();
      return;
    }
    // Central difference of the gradient along v; step scaled to the point and to |v|.
    double step = std::cbrt(std::numeric_limits<double>::epsilon()) * std::max(1.0, x.norm()) / norm;
    stan_dp::log_density_with_gradient(*m->model, propto, jacobian, x + step * v, gp, nullptr);
    stan_dp::log_density_with_gradient(*m->model, propto, jacobian, x - step * v, gm, nullptr);
    Eigen::Map<Eigen::VectorXd>(hvp, n) = (gp - gm) / (2 * step);
  });
}

bs_rng* bs_rng_construct(unsigned int seed, char** error_msg) {
  bs_rng* rng = nullptr;
  stan_dp::guarded("bs_rng_construct", error_msg, [&]() { rng = new bs_rng(seed); });
  return rng;
}

void bs_rng_destruct(bs_rng* rng) { delete rng; }

}  // extern "C"
