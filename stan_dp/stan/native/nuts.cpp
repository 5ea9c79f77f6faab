// Stan's own NUTS services (stan::services::sample::hmc_nuts_diag_e_adapt and hmc_nuts_dense_e_adapt, the code
// CmdStan runs) for the non-private reference run and the noise-aware posteriors of released statistics, on a
// model built through the BridgeStan C API. Draws and sampler diagnostics go into a caller-owned buffer; a
// caller-owned counter reports progress to a polling thread.
#include "common.hpp"

#include <stan/callbacks/interrupt.hpp>
#include <stan/callbacks/logger.hpp>
#include <stan/callbacks/writer.hpp>
#include <stan/services/sample/hmc_nuts_dense_e_adapt.hpp>
#include <stan/services/sample/hmc_nuts_diag_e_adapt.hpp>

#include <atomic>
#include <sstream>

namespace {

// Copies each draw (sampler columns, then constrained parameters, tp and gq) into the output buffer.
class buffer_writer : public stan::callbacks::writer {
 public:
  buffer_writer(double* out, int64_t rows, int64_t cols, int64_t* progress)
      : out_(out), rows_(rows), cols_(cols), progress_(progress) {}
  void operator()(const std::vector<std::string>& names) override { header_cols_ = names.size(); }
  void operator()(const std::vector<double>& state) override {
    if (written_ < rows_ && static_cast<int64_t>(state.size()) == cols_)
      std::copy(state.begin(), state.end(), out_ + written_ * cols_);
    ++written_;
    if (progress_ != nullptr) __atomic_store_n(progress_, written_, __ATOMIC_RELAXED);
  }
  int64_t written() const { return written_; }
  size_t header_cols() const { return header_cols_; }

 private:
  double* out_;
  int64_t rows_, cols_;
  int64_t* progress_;
  int64_t written_ = 0;
  size_t header_cols_ = 0;
};

class error_logger : public stan::callbacks::logger {
 public:
  void error(const std::string& m) override { text_ += m + "\n"; }
  void error(const std::stringstream& m) override { text_ += m.str() + "\n"; }
  void fatal(const std::string& m) override { text_ += m + "\n"; }
  void fatal(const std::stringstream& m) override { text_ += m.str() + "\n"; }
  void warn(const std::string& m) override { keep_warning(m); }
  void warn(const std::stringstream& m) override { keep_warning(m.str()); }
  const std::string& text() const { return text_; }
  const std::string& warnings() const { return warnings_; }

 private:
  void keep_warning(const std::string& m) {
    if (warnings_.size() < 4000) warnings_ += m + "\n";
  }
  std::string text_, warnings_;
};

// Stops the sampler when the caller sets *flag (e.g. on Ctrl-C).
class flag_interrupt : public stan::callbacks::interrupt {
 public:
  explicit flag_interrupt(const int* flag) : flag_(flag) {}
  void operator()() override {
    if (flag_ != nullptr && __atomic_load_n(flag_, __ATOMIC_RELAXED) != 0)
      throw std::runtime_error("interrupted by the user");
  }

 private:
  const int* flag_;
};

// Runs one chain of Stan's NUTS service with a diagonal or dense metric (see the exported functions below).
int run_nuts(bool dense, const bs_model* m, unsigned int seed, unsigned int chain, const char* init_json,
             double init_radius, int num_warmup, int num_samples, int save_warmup, double stepsize, int max_depth,
             double adapt_delta, double* out, int64_t* progress, const int* stop_flag, char** error_msg) {
  try {
    stan_dp::ensure_ad_tape();  // the caller's thread may be new (one Python thread per chain)
    std::unique_ptr<stan::io::var_context> init;
    if (init_json != nullptr && init_json[0] != '\0')
      init = stan_dp::parse_json_text(init_json);
    else
      init = std::make_unique<stan::io::empty_var_context>();
    const int64_t rows = static_cast<int64_t>(num_samples) + (save_warmup ? num_warmup : 0);
    const int64_t cols = 7 + m->param_counts[3];
    buffer_writer sample_writer(out, rows, cols, progress);
    stan::callbacks::writer init_writer, diagnostic_writer;
    error_logger logger;
    flag_interrupt interrupt(stop_flag);
    stan::model::model_base& model = *m->model;
    int rc = dense ? stan::services::sample::hmc_nuts_dense_e_adapt(
                         model, *init, seed, chain, init_radius, num_warmup, num_samples, /*num_thin=*/1,
                         save_warmup != 0, /*refresh=*/0, stepsize, /*stepsize_jitter=*/0.0, max_depth,
                         adapt_delta, /*gamma=*/0.05, /*kappa=*/0.75, /*t0=*/10.0, /*init_buffer=*/75,
                         /*term_buffer=*/50, /*window=*/25, interrupt, logger, init_writer, sample_writer,
                         diagnostic_writer)
                   : stan::services::sample::hmc_nuts_diag_e_adapt(
                         model, *init, seed, chain, init_radius, num_warmup, num_samples, /*num_thin=*/1,
                         save_warmup != 0, /*refresh=*/0, stepsize, /*stepsize_jitter=*/0.0, max_depth,
                         adapt_delta, /*gamma=*/0.05, /*kappa=*/0.75, /*t0=*/10.0, /*init_buffer=*/75,
                         /*term_buffer=*/50, /*window=*/25, interrupt, logger, init_writer, sample_writer,
                         diagnostic_writer);
    if (rc != 0 || sample_writer.written() != rows) {
      std::string why = logger.text().empty() ? logger.warnings() : logger.text();
      stan_dp::report_error(error_msg, "Stan's NUTS service failed (return code " + std::to_string(rc) +
                                           ", " + std::to_string(sample_writer.written()) + " of " +
                                           std::to_string(rows) + " draws written): " + why);
      return -1;
    }
    return 0;
  } catch (const std::exception& e) {
    stan_dp::report_error(error_msg, std::string("Error in Stan's NUTS service: ") + e.what());
  } catch (...) {
    stan_dp::report_error(error_msg, "Unknown error in Stan's NUTS service");
  }
  return -1;
}

}  // namespace

extern "C" {

// Number of columns per draw: 7 sampler columns then every constrained parameter, tp and gq.
int sdp_nuts_columns(const bs_model* m) { return 7 + m->param_counts[3]; }

// Run one chain with a diagonal metric (Stan's default). `out` holds (num_warmup * save_warmup + num_samples) x
// sdp_nuts_columns(m) doubles, row-major. `init_json` (may be NULL) gives initial constrained values; the rest are
// uniform(-R, R) on the unconstrained scale.
int sdp_nuts_sample(const bs_model* m, unsigned int seed, unsigned int chain, const char* init_json,
                    double init_radius, int num_warmup, int num_samples, int save_warmup, double stepsize,
                    int max_depth, double adapt_delta, double* out, int64_t* progress, const int* stop_flag,
                    char** error_msg) {
  return run_nuts(false, m, seed, chain, init_json, init_radius, num_warmup, num_samples, save_warmup, stepsize,
                  max_depth, adapt_delta, out, progress, stop_flag, error_msg);
}

// The same with a dense metric adapted in warmup (hmc_nuts_dense_e_adapt).
int sdp_nuts_dense_sample(const bs_model* m, unsigned int seed, unsigned int chain, const char* init_json,
                          double init_radius, int num_warmup, int num_samples, int save_warmup, double stepsize,
                          int max_depth, double adapt_delta, double* out, int64_t* progress, const int* stop_flag,
                          char** error_msg) {
  return run_nuts(true, m, seed, chain, init_json, init_radius, num_warmup, num_samples, save_warmup, stepsize,
                  max_depth, adapt_delta, out, progress, stop_flag, error_msg);
}

}  // extern "C"
