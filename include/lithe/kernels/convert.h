// Whole-tensor dtype conversion on the host through the reference (de)quantizers, parallel
// over rows: any dequantizable dtype -> f32/f16/bf16, and f32 -> any quantizable dtype.
#pragma once

#include "lithe/core/tensor.h"

namespace lithe {

Result<Tensor> convert(const Tensor& src, DType dst);

}  // namespace lithe
