#include "lithe/core/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>

namespace lithe {

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

std::string format_name(const QuantFormat& f, int64_t n_in) {
  const std::string group = f.group == n_in ? "per-channel" : fmt::format("g{}", f.group);
  return fmt::format("int{} {} {}{}", f.bits, group, f.sym ? "sym" : "asym", f.sparse24 ? " 2:4" : "");
}

Result<int64_t> checked_numel(const Shape& shape) {
  // The product of the non-zero dimensions must fit too: strides multiply them even when another
  // dimension is 0 (a hostile file's [0, 2^40, 2^40] must be refused, not overflow).
  int64_t n = 1;
  bool any_zero = false;
  for (int64_t d : shape) {
    if (d < 0) return error(StatusCode::invalid_argument, "negative dimension in shape {}", shape_str(shape));
    if (d == 0) {
      any_zero = true;
      continue;
    }
    if (n > std::numeric_limits<int64_t>::max() / 8 / d)
      return error(StatusCode::invalid_argument, "shape {} has too many elements", shape_str(shape));
    n *= d;
  }
  return any_zero ? 0 : n;
}

std::vector<int64_t> contiguous_strides(DType dtype, const Shape& shape) {
  const auto& tr = dtype_traits(dtype);
  std::vector<int64_t> st(shape.size());
  if (shape.empty()) return st;
  const size_t last = shape.size() - 1;
  int64_t acc = elems_to_bytes(dtype, shape[last] - shape[last] % tr.block_elems);
  st[last] = tr.is_block ? 0 : tr.block_bytes;
  for (size_t i = last; i-- > 0;) {
    st[i] = acc;
    acc *= shape[i];
  }
  return st;
}

namespace {

Status check_shape(DType dtype, const Shape& shape) {
  LITHE_ASSIGN(int64_t n, checked_numel(shape));
  (void)n;
  const auto& tr = dtype_traits(dtype);
  if (tr.is_block && (shape.empty() || shape.back() % tr.block_elems != 0))
    return error(StatusCode::invalid_argument,
                 "shape {} does not fit {} blocks: the last dimension must be a multiple of {}",
                 shape_str(shape), tr.name, tr.block_elems);
  return Status::ok();
}

size_t span_bytes(DType dtype, const Shape& shape) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  const int64_t last = shape.empty() ? 1 : shape.back();
  return static_cast<size_t>(rows) * static_cast<size_t>(elems_to_bytes(dtype, last));
}

}  // namespace

Result<Tensor> Tensor::empty(DType dtype, Shape shape, Device device) {
  if (dtype == DType::gq)
    return error(StatusCode::invalid_argument, "a gq tensor of shape {} is made by a backend's packer, not allocated",
                 shape_str(shape));
  LITHE_TRY(check_shape(dtype, shape));
  const size_t bytes = span_bytes(dtype, shape);
  LITHE_ASSIGN(BufferPtr buf, device == Device::cpu ? alloc_host(bytes) : alloc_device(bytes));
  return view(std::move(buf), 0, dtype, std::move(shape));
}

Result<Tensor> Tensor::view(BufferPtr buffer, size_t offset, DType dtype, Shape shape) {
  if (dtype == DType::gq)
    return error(StatusCode::invalid_argument, "a gq tensor of shape {} needs its PackedWeight: use Tensor::packed",
                 shape_str(shape));
  LITHE_TRY(check_shape(dtype, shape));
  const size_t bytes = span_bytes(dtype, shape);
  if (offset > buffer->size() || bytes > buffer->size() - offset)
    return error(StatusCode::invalid_argument,
                 "a {} {} tensor needs {} bytes at offset {} but the buffer holds {}",
                 dtype_name(dtype), shape_str(shape), bytes, offset, buffer->size());
  Tensor t;
  t.buffer_ = std::move(buffer);
  t.offset_ = offset;
  t.dtype_ = dtype;
  t.strides_ = contiguous_strides(dtype, shape);
  t.shape_ = std::move(shape);
  return t;
}

Result<Tensor> Tensor::packed(BufferPtr buffer, size_t offset, const PackedWeight& p) {
  if (p.n_out <= 0 || p.n_in <= 0 || p.bytes <= 0)
    return error(StatusCode::invalid_argument, "packed weight [{}, {}] of {} bytes: sizes must be positive", p.n_out,
                 p.n_in, p.bytes);
  const auto bytes = static_cast<size_t>(p.bytes);
  if (offset > buffer->size() || bytes > buffer->size() - offset)
    return error(StatusCode::invalid_argument, "a packed [{}, {}] weight needs {} bytes at offset {} but the buffer holds {}",
                 p.n_out, p.n_in, bytes, offset, buffer->size());
  Tensor t;
  t.buffer_ = std::move(buffer);
  t.offset_ = offset;
  t.dtype_ = DType::gq;
  t.shape_ = {p.n_out, p.n_in};
  t.strides_ = contiguous_strides(DType::gq, t.shape_);
  t.packed_ = std::make_shared<const PackedWeight>(p);
  return t;
}

int64_t Tensor::dim(int i) const {
  const int n = ndim();
  if (i < 0) i += n;
  LITHE_CHECK_MSG(i >= 0 && i < n, "dim {} of a {}-d tensor", i, n);
  return shape_[static_cast<size_t>(i)];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

size_t Tensor::nbytes() const { return packed_ ? static_cast<size_t>(packed_->bytes) : span_bytes(dtype_, shape_); }

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(dtype_, shape_); }

void* Tensor::data() {
  LITHE_CHECK(buffer_ != nullptr);
  return static_cast<uint8_t*>(buffer_->data()) + offset_;
}

const void* Tensor::data() const {
  LITHE_CHECK(buffer_ != nullptr);
  return static_cast<const uint8_t*>(buffer_->data()) + offset_;
}

Result<Tensor> Tensor::reshape(Shape shape) const {
  if (packed_) return error(StatusCode::unsupported, "cannot reshape the packed weight {}", describe());
  if (!is_contiguous())
    return error(StatusCode::invalid_argument, "cannot reshape the non-contiguous tensor {}", describe());
  LITHE_ASSIGN(int64_t n, checked_numel(shape));
  if (n != numel())
    return error(StatusCode::invalid_argument, "cannot reshape {} ({} elements) to {}", describe(), numel(),
                 shape_str(shape));
  return view(buffer_, offset_, dtype_, std::move(shape));
}

Result<Tensor> Tensor::slice_rows(int64_t begin, int64_t end) const {
  if (packed_) return error(StatusCode::unsupported, "cannot slice rows of the packed weight {}", describe());
  if (ndim() == 0 || begin < 0 || end < begin || end > shape_[0])
    return error(StatusCode::invalid_argument, "rows [{}, {}) out of range for {}", begin, end, describe());
  const int64_t block = dtype_traits(dtype_).block_elems;
  if (ndim() == 1 && (begin % block != 0 || end % block != 0))
    return error(StatusCode::invalid_argument, "elements [{}, {}) of {} do not start and end on {}-element blocks",
                 begin, end, describe(), block);
  Tensor t = *this;
  t.batch_.reset();
  t.offset_ += static_cast<size_t>(begin * strides_[0]);
  t.shape_[0] = end - begin;
  if (ndim() == 1) t.offset_ = offset_ + static_cast<size_t>(elems_to_bytes(dtype_, begin));
  return t;
}

Tensor Tensor::with_batch_layout(BatchLayout b) const {
  Tensor t = *this;
  t.batch_ = std::make_shared<const BatchLayout>(std::move(b));
  return t;
}

Result<Tensor> Tensor::to(Device device) const {
  if (packed_) {
    LITHE_ASSIGN(BufferPtr buf, device == Device::cpu ? alloc_host(nbytes()) : alloc_device(nbytes()));
    LITHE_TRY(copy_bytes(*buf, 0, *buffer_, offset_, nbytes()));
    return packed(std::move(buf), 0, *packed_);
  }
  if (!is_contiguous())
    return error(StatusCode::unsupported, "copying the non-contiguous tensor {} is not supported", describe());
  LITHE_ASSIGN(Tensor out, empty(dtype_, shape_, device));
  LITHE_TRY(copy_bytes(*out.buffer_, out.offset_, *buffer_, offset_, nbytes()));
  return out;
}

std::string Tensor::describe() const {
  if (packed_)
    return fmt::format("gq ({}) {} {}", format_name(packed_->fmt, packed_->n_in), shape_str(shape_), device_name(device()));
  return fmt::format("{} {} {}", dtype_name(dtype_), shape_str(shape_), device_name(device()));
}

}  // namespace lithe
