// A data set held as the caller's buffers: the public variables as JSON text (small), the row variables as
// C-contiguous arrays whose leading dimension is the row count (NumPy's own memory, not copied here), and a
// var_context view of any contiguous range of its rows. Model instances read their data through the view in
// their constructor, so the rows are never written as JSON: that took about 11 us per row of ten numbers.
#ifndef STAN_DP_NATIVE_ROW_DATA_HPP
#define STAN_DP_NATIVE_ROW_DATA_HPP

#include "common.hpp"

#include <complex>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace stan_dp {

// Check a variable's dimensions in a context against its declaration, with Stan's messages (the check every
// var_context performs for the model constructor).
void validate_context_dims(const stan::io::var_context& context, const std::string& stage, const std::string& name,
                           const std::string& base_type, const std::vector<size_t>& declared);

// One row variable: a row-major buffer of float64 (real) or int64 (int) values with dims[0] = the row count.
struct row_buffer {
  std::string name;
  const void* data = nullptr;
  bool is_int = false;
  std::vector<size_t> dims;      // full dimensions, dims[0] is the row count
  size_t inner = 1;              // values per row
  std::vector<size_t> offsets;   // column-major index within a row -> offset in the row-major buffer row
};

class row_data {
 public:
  // kinds[k]: 0 for float64, 1 for int64; shapes: the ndims[k] sizes of every variable, concatenated.
  row_data(const char* public_json, const char* count_name, const char* names_csv, const void* const* buffers,
           const int* kinds, const int* ndims, const int64_t* shapes);

  const stan::json::json_data& public_data() const { return *public_; }
  const std::string& count_name() const { return count_name_; }
  int64_t rows() const { return rows_; }
  const std::vector<row_buffer>& buffers() const { return buffers_; }
  const row_buffer* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &buffers_[it->second];
  }

 private:
  std::unique_ptr<stan::json::json_data> public_;
  std::string count_name_;
  int64_t rows_ = 0;
  std::vector<row_buffer> buffers_;
  std::map<std::string, size_t> index_;
};

// The rows [first, first + count) of a row_data as a var_context: the row count reads `count`, each row variable
// its selected rows (column-major, as Stan reads values), every other variable its public value.
class row_range_context : public stan::io::var_context {
 public:
  row_range_context(const row_data& data, int64_t first, int64_t count) : data_(data), first_(first), count_(count) {}

  bool contains_r(const std::string& name) const override;
  bool contains_i(const std::string& name) const override;
  std::vector<double> vals_r(const std::string& name) const override;
  std::vector<int> vals_i(const std::string& name) const override;
  std::vector<std::complex<double>> vals_c(const std::string& name) const override;
  std::vector<size_t> dims_r(const std::string& name) const override;
  std::vector<size_t> dims_i(const std::string& name) const override;
  void names_r(std::vector<std::string>& names) const override;
  void names_i(std::vector<std::string>& names) const override;
  void validate_dims(const std::string& stage, const std::string& name, const std::string& base_type,
                     const std::vector<size_t>& declared) const override {
    validate_context_dims(*this, stage, name, base_type, declared);
  }

 private:
  template <typename T>
  std::vector<T> gather(const row_buffer& b) const;

  const row_data& data_;
  int64_t first_, count_;
};

}  // namespace stan_dp

// Model instances of the programs in a library, built from a row_data: 0 = the user's program, 1 = the row
// program (stan_dp/row_program.py), 2 = the shard program (stan_dp/shard_program.py). nullptr when the library
// has no such program.
stan::model::model_base* sdp_new_program_model(int program, stan::io::var_context& context, unsigned int seed,
                                               std::ostream* msgs);

// Defined by each model's translation unit: a new instance of the model's shard program, or nullptr.
stan::model::model_base* sdp_new_shard_program_model(stan::io::var_context& data_context, unsigned int seed,
                                                     std::ostream* msg_stream);

#endif
