// safetensors writer: one file or shards plus model.safetensors.index.json, written atomically.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "lithe/core/file_util.h"
#include "lithe/formats/safetensors.h"

namespace lithe::safetensors {
namespace {

void put_u64_le(uint64_t v, uint8_t out[8]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Names and metadata go into the JSON header, which must be UTF-8.
bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

Status Writer::add_tensor(const std::string& name, DType dtype, const Shape& shape, std::span<const uint8_t> data) {
  if (name == "__metadata__")
    return error(StatusCode::invalid_argument, "'__metadata__' is reserved and cannot name a tensor");
  if (index_.count(name) != 0) return error(StatusCode::already_exists, "tensor '{}' was already added", name);
  if (!valid_utf8(name)) return error(StatusCode::invalid_argument, "tensor name '{}' is not valid UTF-8", name);
  Result<std::string_view> st_name = dtype_code(dtype);
  if (!st_name) return st_name.status().with_context(fmt::format("tensor '{}'", name));
  Result<int64_t> numel = checked_numel(shape);
  if (!numel) return numel.status().with_context(fmt::format("tensor '{}'", name));
  const uint64_t elem = static_cast<uint64_t>(dtype_traits(dtype).block_bytes);
  uint64_t span = elem;  // the reader's limit: non-zero dims times the element size fit int64
  for (int64_t d : shape) {
    if (d > 0 && static_cast<uint64_t>(d) > static_cast<uint64_t>(INT64_MAX) / span)
      return error(StatusCode::invalid_argument, "tensor '{}': shape {} is too large", name, shape_str(shape));
    if (d > 0) span *= static_cast<uint64_t>(d);
  }
  if (static_cast<uint64_t>(*numel) != data.size() / elem || data.size() % elem != 0)
    return error(StatusCode::invalid_argument, "tensor '{}': a {} {} tensor needs {} elements but {} bytes were given",
                 name, dtype, shape_str(shape), *numel, data.size());
  index_.emplace(name, tensors_.size());
  tensors_.push_back(Pending{name, dtype, shape, data, Tensor{}});
  return Status::ok();
}

Status Writer::add_tensor(const std::string& name, const Tensor& t) {
  if (!t.defined()) return error(StatusCode::invalid_argument, "tensor '{}' is undefined", name);
  if (!t.is_contiguous())
    return error(StatusCode::invalid_argument, "tensor '{}' ({}) is not contiguous", name, t.describe());
  Tensor host = t;
  if (t.device() != Device::cpu) {
    Result<Tensor> copy = t.to(Device::cpu);
    if (!copy) return copy.status().with_context(fmt::format("tensor '{}'", name));
    host = std::move(copy).value();
  }
  const std::span<const uint8_t> bytes(static_cast<const uint8_t*>(host.data()), host.nbytes());
  LITHE_TRY(add_tensor(name, host.dtype(), host.shape(), bytes));
  tensors_.back().keep = std::move(host);
  return Status::ok();
}

Status Writer::set_metadata(const std::string& key, const std::string& value) {
  if (!valid_utf8(key) || !valid_utf8(value))
    return error(StatusCode::invalid_argument, "metadata '{}' is not valid UTF-8", key);
  metadata_[key] = value;
  return Status::ok();
}

uint64_t Writer::total_bytes() const {
  uint64_t n = 0;
  for (const auto& p : tensors_) n += p.data.size();
  return n;
}

std::string Writer::header_for(size_t first, size_t last) const {
  // ordered_json keeps "__metadata__" first and the tensors in insertion (= data) order.
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (size_t i = first; i < last; ++i) {
    const Pending& p = tensors_[i];
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = std::string(dtype_code(p.dtype).value());
    e["shape"] = p.shape;
    e["data_offsets"] = {offset, offset + p.data.size()};
    offset += p.data.size();
    h[p.name] = std::move(e);
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  return text;
}

Status Writer::write_range(const std::string& path, size_t first, size_t last) const {
  const std::string header = header_for(first, last);
  return write_file_atomic_with(path, [&](std::FILE* f) -> Status {
    uint8_t len[8];
    put_u64_le(header.size(), len);
    bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(header.data(), 1, header.size(), f) == header.size();
    for (size_t i = first; ok && i < last; ++i) {
      const auto& d = tensors_[i].data;
      ok = d.empty() || std::fwrite(d.data(), 1, d.size(), f) == d.size();
    }
    if (!ok) return error(StatusCode::io_error, "cannot write '{}': {}", path, std::strerror(errno));
    return Status::ok();
  });
}

Status Writer::write(const std::string& path) const { return write_range(path, 0, tensors_.size()); }

Result<std::vector<uint8_t>> Writer::serialize() const {
  const std::string header = header_for(0, tensors_.size());
  std::vector<uint8_t> out(8 + header.size());
  put_u64_le(header.size(), out.data());
  std::memcpy(out.data() + 8, header.data(), header.size());
  out.reserve(out.size() + total_bytes());
  for (const auto& p : tensors_) out.insert(out.end(), p.data.begin(), p.data.end());
  return out;
}

Result<ShardedWrite> Writer::write_sharded(const std::string& dir, uint64_t max_shard_bytes,
                                           const std::string& prefix) const {
  if (max_shard_bytes == 0) return error(StatusCode::invalid_argument, "max shard size must be positive");
  // Shards as [first, last) ranges of tensors in insertion order.
  std::vector<std::pair<size_t, size_t>> shards;
  uint64_t current = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const uint64_t n = tensors_[i].data.size();
    if (shards.empty() || (current > 0 && current + n > max_shard_bytes)) {
      shards.emplace_back(i, i);
      current = 0;
    }
    shards.back().second = i + 1;
    current += n;
  }
  ShardedWrite out;
  if (shards.size() <= 1) {
    const std::string path = fmt::format("{}/{}.safetensors", dir, prefix);
    LITHE_TRY(write(path));
    out.files.push_back(path);
    return out;
  }
  out.sharded = true;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = fmt::format("{}-{:05d}-of-{:05d}.safetensors", prefix, s + 1, shards.size());
    const std::string path = fmt::format("{}/{}", dir, file);
    LITHE_TRY(write_range(path, shards[s].first, shards[s].second));
    for (size_t i = shards[s].first; i < shards[s].second; ++i) weight_map[tensors_[i].name] = file;
    out.files.push_back(path);
  }
  nlohmann::json index = {{"metadata", {{"total_size", total_bytes()}}}, {"weight_map", std::move(weight_map)}};
  const std::string index_path = fmt::format("{}/{}.safetensors.index.json", dir, prefix);
  LITHE_TRY(write_file_atomic(index_path, index.dump(2) + "\n"));
  out.files.push_back(index_path);
  return out;
}

}  // namespace lithe::safetensors
