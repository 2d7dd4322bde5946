// The calibration activations' placements and the store over them (activation_store.h).
#include "lithe/quantize/activation_store.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "lithe/core/log.h"
#include "lithe/core/memory.h"

namespace lithe::compress {
namespace {

constexpr std::pair<ActivationPlacement, const char*> kNames[] = {{ActivationPlacement::automatic, "auto"},
                                                                  {ActivationPlacement::device, "device"},
                                                                  {ActivationPlacement::host, "host"},
                                                                  {ActivationPlacement::disk, "disk"}};

bool fits_with_reserve(uint64_t bytes, uint64_t free) {
  const uint64_t reserve = activation_reserve(free);
  return free > reserve && bytes <= free - reserve;
}

// Free bytes on `device`, or no limit when the system does not say (the allocation decides).
uint64_t free_or_unlimited(Device device) {
  auto f = free_memory(device);
  if (f.is_ok()) return *f;
  log::debug("free memory of {} unknown ({}): assuming X fits", device_name(device), f.status().message());
  return std::numeric_limits<uint64_t>::max();
}

}  // namespace

const char* activation_placement_name(ActivationPlacement p) {
  for (const auto& [value, name] : kNames)
    if (value == p) return name;
  return "?";
}

Result<ActivationPlacement> parse_activation_placement(std::string_view name) {
  for (const auto& [value, n] : kNames)
    if (name == n) return value;
  return error(StatusCode::invalid_argument, "unknown activation placement '{}' (--activations): use auto, device, "
               "host or disk", name);
}

uint64_t activation_reserve(uint64_t free_bytes) { return std::max<uint64_t>(free_bytes / 8, uint64_t{1} << 30); }

Result<ActivationPlacement> choose_activation_placement(ActivationPlacement asked, uint64_t x_bytes, Device device,
                                                        uint64_t device_free, uint64_t host_free) {
  const bool on_cpu = device == Device::cpu;
  switch (asked) {
    case ActivationPlacement::automatic:
      if (fits_with_reserve(x_bytes, device_free)) return ActivationPlacement::device;
      if (!on_cpu && fits_with_reserve(x_bytes, host_free)) return ActivationPlacement::host;
      return ActivationPlacement::disk;
    case ActivationPlacement::device:
      if (x_bytes > device_free)
        return error(StatusCode::out_of_memory, "the calibration activations need {} bytes on {} but only {} bytes "
                     "are free there: use --activations {}", x_bytes, device_name(device), device_free,
                     on_cpu ? "disk" : "host or disk");
      return asked;
    case ActivationPlacement::host:
      if (x_bytes > host_free)
        return error(StatusCode::out_of_memory, "the calibration activations need {} bytes of host memory but only "
                     "{} bytes are available: use --activations disk", x_bytes, host_free);
      return asked;
    case ActivationPlacement::disk: return asked;
  }
  return error(StatusCode::internal, "unknown activation placement");
}

Result<std::unique_ptr<ActivationStore>> ActivationStore::create(ActivationPlacement asked, Backend& backend,
                                                                 SolverBackend& solver, std::span<const int64_t> rows,
                                                                 int64_t width, const std::string& spill_dir) {
  if (width <= 0) return error(StatusCode::invalid_argument, "activation store: width {}", width);
  std::vector<int64_t> offset{0};
  int64_t max_rows = 0;
  for (int64_t r : rows) {
    if (r <= 0) return error(StatusCode::invalid_argument, "activation store: a window of {} rows", r);
    offset.push_back(offset.back() + r);
    max_rows = std::max(max_rows, r);
  }
  const Device device = backend.device();
  const uint64_t x_bytes = static_cast<uint64_t>(offset.back()) * static_cast<uint64_t>(width) * sizeof(float);
  uint64_t device_free = 0, host_free = 0;
  if (asked != ActivationPlacement::disk) {
    host_free = free_or_unlimited(Device::cpu);
    device_free = device == Device::cpu ? host_free : free_or_unlimited(device);
  }
  LITHE_ASSIGN(const ActivationPlacement p, choose_activation_placement(asked, x_bytes, device, device_free, host_free));
  std::unique_ptr<ActivationStore> s(new ActivationStore(p, solver, std::move(offset), width));
  const Shape shape{s->offset_.back(), width};
  switch (p) {
    case ActivationPlacement::device: {
      auto x = backend.alloc(DType::f32, shape);
      if (!x) return error(x.status().code(), "the calibration activations ({} bytes) on {}: {}; use --activations "
                           "{}", x_bytes, device_name(device), x.status().message(),
                           device == Device::cpu ? "disk" : "host or disk");
      s->x_ = std::move(*x);
      break;
    }
    case ActivationPlacement::host: {
      LITHE_ASSIGN(BufferPtr b, alloc_host_pinned(x_bytes));
      LITHE_ASSIGN(s->x_, Tensor::view(std::move(b), 0, DType::f32, shape));
      break;
    }
    case ActivationPlacement::disk: {
      LITHE_ASSIGN(SpillFile f, SpillFile::create(spill_dir, x_bytes));
      s->file_.emplace(std::move(f));
      if (device != Device::cpu) {
        LITHE_ASSIGN(BufferPtr b, alloc_host_pinned(static_cast<size_t>(max_rows) * s->row_bytes()));
        LITHE_ASSIGN(s->staging_, Tensor::view(std::move(b), 0, DType::f32, {max_rows, width}));
      }
      break;
    }
    case ActivationPlacement::automatic: return error(StatusCode::internal, "activation placement left undecided");
  }
  if (p != ActivationPlacement::device) {
    const std::string where = p == ActivationPlacement::host
                                  ? std::string("host memory")
                                  : fmt::format("an unlinked temporary file in '{}'", spill_dir);
    const std::string why = asked == ActivationPlacement::automatic
                                ? fmt::format("auto: {} bytes free on {}, {} of host memory", device_free,
                                              device_name(device), host_free)
                                : fmt::format("--activations {}", activation_placement_name(asked));
    log::info("calibration activations: {} bytes kept in {} ({})", x_bytes, where, why);
  }
  return s;
}

uint64_t ActivationStore::bytes() const { return static_cast<uint64_t>(offset_.back()) * row_bytes(); }

Result<Tensor> ActivationStore::window(size_t i) const { return x_.slice_rows(offset_[i], offset_[i + 1]); }

Result<Tensor> ActivationStore::target(size_t i, Tensor& scratch) {
  if (placement_ == ActivationPlacement::device) return window(i);
  return scratch.slice_rows(0, rows(i));
}

Status ActivationStore::copy_rows(const Tensor& src, Tensor& dst) {
  if (src.data() == dst.data()) return Status::ok();
  if (src.device() == dst.device()) return solver_.copy(src, dst);
  // Across devices: copy_bytes waits for all device work first; a copy to the device may still be
  // landing when it returns (pageable memory), so it is waited for before the model reads it.
  LITHE_TRY(copy_bytes(*dst.buffer(), dst.offset(), *src.buffer(), src.offset(), src.nbytes()));
  return dst.device() == Device::cpu ? Status::ok() : solver_.synchronize();
}

Status ActivationStore::load(size_t i, Tensor& dst) {
  LITHE_ASSIGN(Tensor d, dst.slice_rows(0, rows(i)));
  if (!file_) {
    LITHE_ASSIGN(const Tensor w, window(i));
    return copy_rows(w, d);
  }
  const uint64_t at = static_cast<uint64_t>(offset_[i]) * row_bytes();
  if (d.device() == Device::cpu) return file_->read(at, d.data(), d.nbytes());
  LITHE_ASSIGN(Tensor host, staging_.slice_rows(0, rows(i)));
  LITHE_TRY(file_->read(at, host.data(), host.nbytes()));
  return copy_rows(host, d);
}

Status ActivationStore::store(size_t i, const Tensor& src) {
  LITHE_ASSIGN(const Tensor s, src.slice_rows(0, rows(i)));
  if (!file_) {
    LITHE_ASSIGN(Tensor w, window(i));
    return copy_rows(s, w);
  }
  const uint64_t at = static_cast<uint64_t>(offset_[i]) * row_bytes();
  if (s.device() == Device::cpu) return file_->write(at, s.data(), s.nbytes());
  LITHE_ASSIGN(Tensor host, staging_.slice_rows(0, rows(i)));
  LITHE_TRY(copy_rows(s, host));
  return file_->write(at, host.data(), host.nbytes());
}

}  // namespace lithe::compress
