// Where the calibration pipeline (pipeline.h) keeps X, every calibration window's block input
// (tokens x d_model f32: 4.3 GB for 128 windows of 2048 tokens of a 7B model), between blocks:
//   device: one tensor on the model's device; windows run through a block in place, no copies;
//   host:   host memory (page-locked when the model is on cuda); a window is copied into a
//           one-window scratch on the model's device, run through the block and copied back;
//   disk:   an unlinked temporary file (spill_file.h) read and written one window at a time
//           (through a one-window page-locked host buffer when the model is on cuda).
// The model's device then holds X (device) or just the scratch (host, disk), plus the Hessians.
// auto (choose_activation_placement) takes the device when X fits there, else host memory, else
// the disk. Every placement gives the same bits: only where the rows wait between blocks differs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lithe/compress/solver_backend.h"
#include "lithe/quantize/spill_file.h"
#include "lithe/runtime/backend.h"

namespace lithe::compress {

enum class ActivationPlacement { automatic, device, host, disk };
const char* activation_placement_name(ActivationPlacement p);  // "auto", "device", "host", "disk"
Result<ActivationPlacement> parse_activation_placement(std::string_view name);

// Free bytes auto leaves to everything else (the block workspace, the Hessians, the solvers'
// scratch, other processes): an eighth of `free_bytes`, at least 1 GiB.
uint64_t activation_reserve(uint64_t free_bytes);

// Where X of `x_bytes` goes for a model on `device` with `device_free` bytes free there (the cpu:
// host memory, so device_free is host_free) and `host_free` bytes of host memory available.
// automatic: the device when X plus activation_reserve fits there; else, on cuda, the host when it
// fits there likewise; else the disk. device / host: that placement, or out_of_memory naming the
// bytes asked and free and the placements to use instead when X does not fit at all. disk: the
// disk (SpillFile checks the space).
Result<ActivationPlacement> choose_activation_placement(ActivationPlacement asked, uint64_t x_bytes, Device device,
                                                        uint64_t device_free, uint64_t host_free);

// X: windows of rows[i] rows of `width` f32 each, in window order. Window i moves in and out of
// the model's device through target / load / store, which cost nothing for the device placement.
class ActivationStore {
 public:
  // X placed as `asked` (automatic: by choose_activation_placement with the free memory now) for
  // a model on `backend`; copies run after the model's queued work through `solver` (same
  // device). The disk placement's file goes to `spill_dir`. Logs the placement when not device.
  static Result<std::unique_ptr<ActivationStore>> create(ActivationPlacement asked, Backend& backend,
                                                         SolverBackend& solver, std::span<const int64_t> rows,
                                                         int64_t width, const std::string& spill_dir);
  ActivationPlacement placement() const { return placement_; }
  uint64_t bytes() const;  // all of X, wherever it is
  int64_t rows(size_t i) const { return offset_[i + 1] - offset_[i]; }

  // The rows where window i is worked on in place: X's own (device) or the first rows(i) rows of
  // `scratch` ([>= rows(i), width] f32 on the model's device; host, disk), unchanged until load.
  Result<Tensor> target(size_t i, Tensor& scratch);
  // The first rows(i) rows of dst (on the model's device) = window i; nothing when dst is X's own.
  Status load(size_t i, Tensor& dst);
  // Window i = the first rows(i) rows of src (on the model's device); nothing when src is X's own.
  Status store(size_t i, const Tensor& src);

 private:
  ActivationStore(ActivationPlacement p, SolverBackend& solver, std::vector<int64_t> offset, int64_t width)
      : placement_(p), solver_(solver), offset_(std::move(offset)), width_(width) {}
  Result<Tensor> window(size_t i) const;  // device, host: X's rows of window i
  Status copy_rows(const Tensor& src, Tensor& dst);  // same shape, any devices
  uint64_t row_bytes() const { return static_cast<uint64_t>(width_) * sizeof(float); }

  ActivationPlacement placement_;
  SolverBackend& solver_;
  std::vector<int64_t> offset_;  // window i is rows [offset_[i], offset_[i + 1])
  int64_t width_;
  Tensor x_;                      // device, host
  std::optional<SpillFile> file_; // disk
  Tensor staging_;                // disk with the model on cuda: one window on the host
};

}  // namespace lithe::compress
