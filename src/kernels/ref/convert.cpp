// Whole-tensor dtype conversion on the host: each row (the last dimension) is decoded to f32 by
// ref::dequantize_row and encoded by ref::quantize_row, rows split over the global thread pool.
// Any dequantizable source and any quantizable destination combine (f32 -> q8_0, q4_k -> f16,
// q4_k -> q8_0 ...); a source already in the destination dtype is copied.
#include "lithe/kernels/convert.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "lithe/core/thread_pool.h"
#include "lithe/kernels/ggml_quants.h"

namespace lithe {

Result<Tensor> convert(const Tensor& src, DType dst) {
  if (!src.defined()) return error(StatusCode::invalid_argument, "convert to {}: the source tensor is undefined", dst);
  if (src.device() != Device::cpu)
    return error(StatusCode::unsupported, "convert {} to {}: only host tensors are converted; copy it to the cpu first",
                 src.describe(), dst);
  if (!src.is_contiguous())
    return error(StatusCode::invalid_argument, "convert {} to {}: the source is not contiguous", src.describe(), dst);
  const DType st = src.dtype();
  if (!ref::can_dequantize(st))
    return error(StatusCode::unsupported, "convert {} to {}: cannot read {} values", src.describe(), dst, st);
  if (!ref::can_quantize(dst))
    return error(StatusCode::unsupported, "convert {} to {}: cannot encode {} values", src.describe(), dst, dst);

  auto made = Tensor::empty(dst, src.shape());
  if (!made) return made.status().with_context(fmt::format("convert {} to {}", src.describe(), dst));
  Tensor out = std::move(made).value();

  const int64_t numel = src.numel();
  if (numel == 0) return out;
  if (st == dst) {
    std::memcpy(out.data(), src.data(), src.nbytes());
    return out;
  }
  // shape [..., row]: rows of `row` elements (a 0-d tensor is one row of one element).
  const int64_t row = src.ndim() == 0 ? 1 : src.shape().back();
  const int64_t rows = numel / row;
  const auto src_row_bytes = static_cast<size_t>(elems_to_bytes(st, row));
  const auto dst_row_bytes = static_cast<size_t>(elems_to_bytes(dst, row));
  const auto* in = static_cast<const uint8_t*>(src.data());
  auto* res = static_cast<uint8_t*>(out.data());
  // f32 rows are used in place when aligned (out is freshly allocated, so always aligned).
  const bool src_f32_in_place = st == DType::f32 && reinterpret_cast<uintptr_t>(in) % alignof(float) == 0;
  const bool dst_f32 = dst == DType::f32;

  std::mutex mu;
  Status first_error;
  // Rows per task: at least ~16K elements so that small rows do not drown in scheduling.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / row);
  global_pool().parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> tmp;
    if (!src_f32_in_place && !dst_f32) tmp.resize(static_cast<size_t>(row));
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* s = in + static_cast<size_t>(r) * src_row_bytes;
      uint8_t* d = res + static_cast<size_t>(r) * dst_row_bytes;
      Status st_row;
      if (dst_f32) {
        st_row = ref::dequantize_row(st, s, reinterpret_cast<float*>(d), row);
      } else if (src_f32_in_place) {
        st_row = ref::quantize_row(dst, reinterpret_cast<const float*>(s), d, row);
      } else {
        st_row = ref::dequantize_row(st, s, tmp.data(), row);
        if (st_row.is_ok()) st_row = ref::quantize_row(dst, tmp.data(), d, row);
      }
      if (!st_row.is_ok()) {
        std::lock_guard<std::mutex> lk(mu);
        if (first_error.is_ok()) first_error = st_row.with_context(fmt::format("convert row {}", r));
        return;
      }
    }
  });
  if (!first_error.is_ok()) return first_error;
  return out;
}

}  // namespace lithe
