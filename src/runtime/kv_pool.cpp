#include "lithe/runtime/kv_pool.h"

#include <algorithm>

namespace lithe {

Status make_kv_slabs(int64_t n_layers, int64_t rows, int64_t kv_dim, DType dtype, Device device, std::string_view what,
                     std::string_view hint, std::vector<Tensor>& k, std::vector<Tensor>& v) {
  if (dtype != DType::f32 && dtype != DType::f16)
    return error(StatusCode::invalid_argument, "KV cache dtype {} is not supported: use f32 or f16", dtype_name(dtype));
  if (n_layers <= 0 || rows <= 0 || kv_dim <= 0)
    return error(StatusCode::invalid_argument, "{}: {} layers x {} rows x {} is empty", what, n_layers, rows, kv_dim);
  const size_t slab = static_cast<size_t>(rows * kv_dim) * dtype_traits(dtype).block_bytes;
  auto all = Tensor::empty(dtype, {n_layers * 2, rows, kv_dim}, device);
  if (!all) {
    const double gib = 2.0 * static_cast<double>(n_layers) * static_cast<double>(slab) / (1u << 30);
    const std::string why = all.status().message();
    return error(StatusCode::out_of_memory, "{} x {} layers ({:.2f} GiB) does not fit: {}{}", what, n_layers, gib, why,
                 why.find("--") == std::string::npos ? fmt::format("; {}", hint) : "");
  }
  k.clear();
  v.clear();
  for (int64_t l = 0; l < n_layers; ++l) {
    LITHE_ASSIGN(Tensor kl, Tensor::view(all->buffer(), static_cast<size_t>(2 * l) * slab, dtype, {rows, kv_dim}));
    LITHE_ASSIGN(Tensor vl, Tensor::view(all->buffer(), static_cast<size_t>(2 * l + 1) * slab, dtype, {rows, kv_dim}));
    k.push_back(std::move(kl));
    v.push_back(std::move(vl));
  }
  return Status::ok();
}

Result<std::shared_ptr<KvPool>> KvPool::create(int64_t n_layers, int64_t num_blocks, int64_t block_size,
                                               int64_t kv_dim, DType dtype, Device device) {
  if (block_size < 1) return error(StatusCode::invalid_argument, "--block-size {} must be >= 1", block_size);
  if (num_blocks < 1 || num_blocks > (int64_t{1} << 30) / block_size)
    return error(StatusCode::invalid_argument, "--kv-blocks {} must be in [1, 2^30 / block size {}]", num_blocks,
                 block_size);
  std::shared_ptr<KvPool> p(new KvPool());
  LITHE_TRY(make_kv_slabs(n_layers, num_blocks * block_size, kv_dim, dtype, device,
                          fmt::format("KV pool of {} blocks x {} tokens", num_blocks, block_size),
                          "lower --kv-blocks", p->k_, p->v_));
  p->block_size_ = block_size;
  p->num_blocks_ = num_blocks;
  p->kv_dim_ = kv_dim;
  p->dtype_ = dtype;
  p->device_ = device;
  for (const auto& t : p->k_) p->bytes_ += 2 * t.nbytes();
  p->free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t i = num_blocks; i-- > 0;) p->free_.push_back(static_cast<int32_t>(i));
  return p;
}

bool KvPool::allocate(int64_t n, std::vector<int32_t>& table) {
  if (n <= 0) return true;
  if (n > num_free()) return false;
  for (int64_t i = 0; i < n; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvPool::release(std::vector<int32_t>& table) {
  free_.insert(free_.end(), table.rbegin(), table.rend());
  table.clear();
}

}  // namespace lithe
