// Tensor: a typed, shaped, strided view into a shared Buffer on one device.
// Shapes are row-major, outermost dimension first (numpy order; GGUF's innermost-first dims are
// reversed by the reader). Strides are in bytes. Block dtypes (q4_0, q4_k, ...) pack whole rows:
// the last dimension is a multiple of the block size, contiguous, and its stride is reported as 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lithe/core/buffer.h"
#include "lithe/core/dtype.h"
#include "lithe/core/packed.h"

namespace lithe {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[576, 1536]"

// A second copy of a weight matrix's values in the layout one kernel set's matrix-matrix path
// reads (CPU: decoded records, so batched calls do not decode the blocks again on every call),
// made at load by Backend::add_batch_layout. `layout` names that layout: a kernel set that did not
// make it ignores the copy.
struct BatchLayout {
  BufferPtr buffer;
  int layout = 0;
};

class Tensor {
 public:
  Tensor() = default;

  // A new zeroed contiguous tensor.
  static Result<Tensor> empty(DType dtype, Shape shape, Device device = Device::cpu);
  // A contiguous view of `buffer` at byte `offset`; checks that it fits and the row is whole blocks.
  static Result<Tensor> view(BufferPtr buffer, size_t offset, DType dtype, Shape shape);
  // A packed weight matrix (dtype gq, shape [n_out, n_in]) of `p.bytes` bytes at `offset`.
  static Result<Tensor> packed(BufferPtr buffer, size_t offset, const PackedWeight& p);

  bool defined() const { return buffer_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const;
  size_t nbytes() const;  // bytes spanned by a contiguous tensor of this shape
  bool is_contiguous() const;
  Device device() const { return buffer_ ? buffer_->device() : Device::cpu; }
  const BufferPtr& buffer() const { return buffer_; }
  size_t offset() const { return offset_; }
  // The layout of a gq tensor's bytes; null for every other dtype.
  const PackedWeight* packed() const { return packed_.get(); }
  // The matrix-matrix copy attached by with_batch_layout; null when there is none. reshape,
  // slice_rows and to() drop it (their results hold other rows or live elsewhere).
  const BatchLayout* batch_layout() const { return batch_.get(); }
  Tensor with_batch_layout(BatchLayout b) const;

  void* data();
  const void* data() const;
  template <typename T> T* data_as() { return static_cast<T*>(data()); }
  template <typename T> const T* data_as() const { return static_cast<const T*>(data()); }

  // Same bytes, new shape (contiguous tensors only; numel must match; not for packed tensors).
  Result<Tensor> reshape(Shape shape) const;
  // Rows [begin, end) of dimension 0 (a view; no copy; not for packed tensors).
  Result<Tensor> slice_rows(int64_t begin, int64_t end) const;
  // A contiguous copy on `device`.
  Result<Tensor> to(Device device) const;

  std::string describe() const;  // "q4_1 [576, 1536] cpu"

 private:
  BufferPtr buffer_;
  size_t offset_ = 0;
  DType dtype_ = DType::f32;
  Shape shape_;
  std::vector<int64_t> strides_;
  std::shared_ptr<const PackedWeight> packed_;  // dtype gq only
  std::shared_ptr<const BatchLayout> batch_;
};

// Contiguous byte strides for a shape (last stride 0 for block dtypes).
std::vector<int64_t> contiguous_strides(DType dtype, const Shape& shape);
// Number of elements, or an error when a dimension is negative or the product overflows.
Result<int64_t> checked_numel(const Shape& shape);

}  // namespace lithe
