// Row data held in the caller's buffers (row_data.hpp), and a small C API over model instances built from it:
// the user's unchanged program on all rows (the factorization check) or on none (the prior), without JSON.
#include "row_data.hpp"

#include <cstring>
#include <limits>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <set>
#include <sstream>
#include <stdexcept>

namespace stan_dp {

namespace {

void dims_text(std::ostream& out, const std::vector<size_t>& dims) {
  out << '(';
  for (size_t k = 0; k < dims.size(); ++k) out << (k ? "," : "") << dims[k];
  out << ')';
}

std::vector<std::string> split_csv(const char* csv) {
  std::vector<std::string> out;
  if (csv == nullptr) return out;
  std::stringstream in(csv);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace

void validate_context_dims(const stan::io::var_context& context, const std::string& stage, const std::string& name,
                           const std::string& base_type, const std::vector<size_t>& declared) {
  std::vector<size_t> found = context.dims_r(name);
  size_t n_found = found.empty() ? (context.contains_r(name) ? 1 : 0) : 1;
  for (size_t d : found) n_found *= d;
  size_t n_declared = 1;
  for (size_t d : declared) n_declared *= d;
  if (n_found == 0 && n_declared == 0) return;
  if (!context.contains_r(name))
    throw std::runtime_error("variable does not exist; processing stage=" + stage + "; variable name=" + name +
                             "; base type=" + base_type);
  if (found != declared) {
    std::stringstream msg;
    msg << "mismatch in dimensions declared and found in context; processing stage=" << stage
        << "; variable name=" << name << "; dims declared=";
    dims_text(msg, declared);
    msg << "; dims found=";
    dims_text(msg, found);
    throw std::runtime_error(msg.str());
  }
  if (base_type == "int" && !context.contains_i(name))
    throw std::runtime_error("int variable contained non-int values; processing stage=" + stage +
                             "; variable name=" + name);
}

row_data::row_data(const char* public_json, const char* count_name, const char* names_csv,
                   const void* const* buffers, const int* kinds, const int* ndims, const int64_t* shapes)
    : public_(parse_json_text(public_json == nullptr ? "{}" : public_json)), count_name_(count_name) {
  std::vector<int> count = public_->vals_i(count_name_);
  if (count.size() != 1 || count[0] < 0)
    throw std::invalid_argument("the row count '" + count_name_ + "' must be a non-negative int");
  rows_ = count[0];
  std::vector<std::string> names = split_csv(names_csv);
  const int64_t* shape = shapes;
  for (size_t k = 0; k < names.size(); ++k) {
    row_buffer b;
    b.name = names[k];
    b.data = buffers[k];
    b.is_int = kinds[k] == 1;
    for (int j = 0; j < ndims[k]; ++j) b.dims.push_back(static_cast<size_t>(shape[j]));
    shape += ndims[k];
    if (b.dims.empty() || static_cast<int64_t>(b.dims[0]) != rows_)
      throw std::invalid_argument("row variable '" + b.name + "' does not have leading dimension " + count_name_ +
                                  " = " + std::to_string(rows_));
    // Inner dimensions (all but the first): column-major index c -> row-major offset within one row.
    std::vector<size_t> inner(b.dims.begin() + 1, b.dims.end());
    for (size_t d : inner) b.inner *= d;
    b.offsets.resize(b.inner);
    for (size_t c = 0; c < b.inner; ++c) {
      size_t rest = c, offset = 0, stride = b.inner;
      for (size_t j = 0; j < inner.size(); ++j) {
        stride /= inner[j];
        offset += (rest % inner[j]) * stride;
        rest /= inner[j];
      }
      b.offsets[c] = offset;
    }
    index_[b.name] = buffers_.size();
    buffers_.push_back(std::move(b));
  }
}

template <typename T>
std::vector<T> row_range_context::gather(const row_buffer& b) const {
  const size_t n = static_cast<size_t>(count_);
  std::vector<T> out(n * b.inner);
  for (size_t c = 0; c < b.inner; ++c) {
    T* column = out.data() + c * n;
    const size_t offset = b.offsets[c];
    if (b.is_int) {
      const int64_t* src = static_cast<const int64_t*>(b.data) + static_cast<size_t>(first_) * b.inner + offset;
      for (size_t k = 0; k < n; ++k) column[k] = static_cast<T>(src[k * b.inner]);
    } else {
      const double* src = static_cast<const double*>(b.data) + static_cast<size_t>(first_) * b.inner + offset;
      for (size_t k = 0; k < n; ++k) column[k] = static_cast<T>(src[k * b.inner]);
    }
  }
  return out;
}

bool row_range_context::contains_r(const std::string& name) const {
  return name == data_.count_name() || data_.find(name) != nullptr || data_.public_data().contains_r(name);
}

bool row_range_context::contains_i(const std::string& name) const {
  if (name == data_.count_name()) return true;
  if (const row_buffer* b = data_.find(name)) return b->is_int;
  return data_.public_data().contains_i(name);
}

std::vector<double> row_range_context::vals_r(const std::string& name) const {
  if (name == data_.count_name()) return {static_cast<double>(count_)};
  if (const row_buffer* b = data_.find(name)) return gather<double>(*b);
  return data_.public_data().vals_r(name);
}

std::vector<int> row_range_context::vals_i(const std::string& name) const {
  if (name == data_.count_name()) return {static_cast<int>(count_)};
  if (const row_buffer* b = data_.find(name)) {
    if (!b->is_int) return {};
    const int64_t* src = static_cast<const int64_t*>(b->data) + static_cast<size_t>(first_) * b->inner;
    for (size_t k = 0; k < static_cast<size_t>(count_) * b->inner; ++k)
      if (src[k] > std::numeric_limits<int>::max() || src[k] < std::numeric_limits<int>::min())
        throw std::domain_error("int variable " + name + " has a value outside the range of a Stan int");
    return gather<int>(*b);
  }
  return data_.public_data().vals_i(name);
}

std::vector<std::complex<double>> row_range_context::vals_c(const std::string& name) const {
  if (data_.find(name) != nullptr || name == data_.count_name())
    throw std::invalid_argument("complex row variables are not supported (variable " + name + ")");
  return data_.public_data().vals_c(name);
}

std::vector<size_t> row_range_context::dims_r(const std::string& name) const {
  if (name == data_.count_name()) return {};
  if (const row_buffer* b = data_.find(name)) {
    std::vector<size_t> dims = b->dims;
    dims[0] = static_cast<size_t>(count_);
    return dims;
  }
  return data_.public_data().dims_r(name);
}

std::vector<size_t> row_range_context::dims_i(const std::string& name) const {
  if (name == data_.count_name()) return {};
  if (const row_buffer* b = data_.find(name)) return b->is_int ? dims_r(name) : std::vector<size_t>{};
  return data_.public_data().dims_i(name);
}

void row_range_context::names_r(std::vector<std::string>& names) const {
  data_.public_data().names_r(names);
  std::set<std::string> have(names.begin(), names.end());
  if (!have.count(data_.count_name())) names.push_back(data_.count_name());
  for (const row_buffer& b : data_.buffers())
    if (!have.count(b.name)) names.push_back(b.name);
}

void row_range_context::names_i(std::vector<std::string>& names) const {
  data_.public_data().names_i(names);
  std::set<std::string> have(names.begin(), names.end());
  if (!have.count(data_.count_name())) names.push_back(data_.count_name());
  for (const row_buffer& b : data_.buffers())
    if (b.is_int && !have.count(b.name)) names.push_back(b.name);
}

}  // namespace stan_dp

stan::model::model_base* sdp_new_program_model(int program, stan::io::var_context& context, unsigned int seed,
                                               std::ostream* msgs) {
  switch (program) {
    case 0:
      return &new_model(context, seed, msgs);
    case 1:
      return sdp_new_row_program_model(context, seed, msgs);
    case 2:
      return sdp_new_shard_program_model(context, seed, msgs);
    default:
      throw std::invalid_argument("unknown program kind");
  }
}

// A model instance built from row data (the C API below).
struct sdp_program {
  std::unique_ptr<stan::model::model_base> model;
};

extern "C" {

stan_dp::row_data* sdp_data_construct(const char* public_json, const char* count_name, const char* names_csv,
                                      const void* const* buffers, const int* kinds, const int* ndims,
                                      const int64_t* shapes, char** error_msg) {
  stan_dp::row_data* out = nullptr;
  int rc = stan_dp::guarded("sdp_data_construct", error_msg, [&]() {
    out = new stan_dp::row_data(public_json, count_name, names_csv, buffers, kinds, ndims, shapes);
  });
  return rc == 0 ? out : nullptr;
}

void sdp_data_destruct(stan_dp::row_data* data) { delete data; }

// Give freed heap memory back to the system (glibc keeps the many small blocks of a destroyed instance, e.g. the
// full-data instance of the factorization check, resident otherwise). Returns 1 if memory was released.
int sdp_release_memory() {
#if defined(__GLIBC__)
  return malloc_trim(0);
#else
  return 0;
#endif
}

// The instance of `program` (0 user, 1 row program, 2 shard program) on rows [first, first + count).
sdp_program* sdp_program_construct(const stan_dp::row_data* data, int program, int64_t first, int64_t count,
                                   unsigned int seed, char** error_msg) {
  std::unique_ptr<sdp_program> h(new sdp_program());
  int rc = stan_dp::guarded("sdp_program_construct", error_msg, [&]() {
    if (first < 0 || count < 0 || first + count > data->rows())
      throw std::out_of_range("the row range is outside the data");
    stan_dp::row_range_context context(*data, first, count);
    h->model.reset(sdp_new_program_model(program, context, seed, stan_dp::print_stream()));
    if (!h->model) throw std::invalid_argument("this model library has no such program");
  });
  return rc == 0 ? h.release() : nullptr;
}

void sdp_program_destruct(sdp_program* h) { delete h; }

int sdp_program_dim(const sdp_program* h) { return static_cast<int>(h->model->num_params_r()); }

// Log density with constants (propto = false), with or without the Jacobian of the constraining transforms.
int sdp_program_log_density(const sdp_program* h, const double* theta, int jacobian, double* value,
                            char** error_msg) {
  return stan_dp::guarded("sdp_program_log_density", error_msg, [&]() {
    Eigen::VectorXd x = Eigen::Map<const Eigen::VectorXd>(theta, h->model->num_params_r());
    *value = jacobian ? h->model->log_prob_jacobian(x, nullptr) : h->model->log_prob(x, nullptr);
  });
}

}  // extern "C"
