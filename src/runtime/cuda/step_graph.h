// Host arguments of CUDA ops (token ids, positions, cache slots, cache lengths) and the capture /
// replay of decode steps as CUDA graphs.
//
// Every op copies its host arrays into a pinned staging buffer and reads them from a device
// mirror of it. Outside a step (eager) each op uploads its own piece. Inside a step:
//   - the first time a key is seen, ops run eagerly (buffers grow, cuBLAS/attention scratch is
//     sized);
//   - the second time, the step is captured: one upload of the whole staging region first, then
//     every kernel; at end_step the upload is shrunk to the bytes staged and the graph instantiated;
//   - afterwards ops only write their arrays into the same staging offsets (checked against the
//     capture) and end_step launches the graph.
// Eager staging reuses a piece staged earlier with the same bytes (a batch's per-sequence slots,
// positions and block tables are the same for every layer): one upload per distinct array, not
// one per op. A reused piece is never overwritten before the stream is idle: the memo is dropped
// whenever the cursor goes back to the start. (Capture and replay stage every piece: their piece
// lists must match whatever the arrays hold.)
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lithe/core/status.h"

namespace lithe::cuda_backend {

Status check(cudaError_t e, const char* what);

class StepGraph {
 public:
  explicit StepGraph(cudaStream_t s);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Device address holding a copy of `bytes` bytes at `host` by the time later work on the stream
  // runs. Eager: uploads now; capture/replay: staged for the step's single upload.
  Result<const void*> stage(const void* host, size_t bytes);
  // True when ops must not enqueue work (the step is replayed from its graph).
  bool replaying() const { return mode_ == Mode::replay; }
  bool capturing() const { return mode_ == Mode::capture; }

  Status begin(uint64_t key);
  Status end(bool run);
  // Drops every recorded graph (they point at device memory about to be freed: a scratch buffer
  // that grows). Only between steps or in a step's first, eager run.
  Status forget();
  // The stream is idle: staging space may be reused.
  void synced() {
    if (mode_ == Mode::eager) restart();
    if (timing_ != nullptr) timing_->synced = timing_->mark = std::chrono::steady_clock::now();
  }

 private:
  enum class Mode { eager, capture, replay };
  struct Entry {
    int seen = 0;
    cudaGraphExec_t exec = nullptr;
    std::vector<size_t> sizes;  // staged piece sizes, in op order
  };
  Status reserve(size_t bytes);
  static constexpr size_t kMaxSteps = 64;  // distinct step keys remembered (graphs kept)

  // LITHE_STEP_TIMES=1 (a diagnostic): each replayed step's GPU time (events around the graph
  // launch), the host time from one replay launch to the next and from the last stream sync (the
  // step's results fetched) to the next launch; medians printed to stderr at exit. The first two
  // differ by how long the GPU waits on the host between decode steps.
  struct Timing {
    cudaEvent_t start = nullptr, stop = nullptr;
    bool pending = false;  // start / stop hold a replay not yet collected
    // The last replay launch, the last sync, the last sync or staged piece of a replay.
    std::chrono::steady_clock::time_point last{}, synced{}, mark{};
    std::vector<float> gpu_us, launch_us, host_us;  // host_us: from the last sync to the launch
    std::vector<std::vector<float>> piece_us;       // [piece]: host time since the previous mark
    void lap(size_t piece);
  };
  void time_replay_begin();
  void time_replay_end();
  std::unique_ptr<Timing> timing_;

  cudaStream_t stream_;
  Mode mode_ = Mode::eager;
  Entry* cur_ = nullptr;
  size_t piece_ = 0;  // index into cur_->sizes while replaying
  char* host_ = nullptr;
  char* dev_ = nullptr;
  size_t cap_ = 0, cursor_ = 0;
  std::unordered_map<uint64_t, Entry> steps_;
  // Eager pieces by content (views into host_) -> their offset; valid until the cursor restarts.
  std::unordered_map<std::string_view, size_t> memo_;
  void restart() {
    cursor_ = 0;
    memo_.clear();
  }
};

}  // namespace lithe::cuda_backend
