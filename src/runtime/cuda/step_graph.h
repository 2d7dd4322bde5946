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
//
// Replays do not wait for the stream: a decode loop stages step N+1 while step N still runs
// (Model::launch_top_k). So there are two host staging buffers, each step's graph instantiated
// once per buffer, and a replay takes the other buffer than the work before it: buffer b is
// reused only after the work enqueued while it was current (an event recorded when leaving it)
// has run, which in a decode loop two steps deep has always happened already. Eager and capture
// steps still start from an idle stream.
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

  // Device address holding a copy of `bytes` bytes at `src` by the time later work on the stream
  // runs. Eager: uploads now; capture/replay: staged for the step's single upload.
  Result<const void*> stage(const void* src, size_t bytes);
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
  }

 private:
  enum class Mode { eager, capture, replay };
  struct Entry {
    int seen = 0;
    cudaGraphExec_t exec[2] = {nullptr, nullptr};  // the step's graph uploading from host buffer 0 / 1
    std::vector<size_t> sizes;                     // staged piece sizes, in op order
  };
  Status reserve(size_t bytes);
  void drop_graphs();
  Status use_other_buffer();  // replay: switch host buffers (see the top)
  static constexpr size_t kMaxSteps = 64;  // distinct step keys remembered (graphs kept)

  // LITHE_STEP_TIMES=1 (a diagnostic): each replayed step's GPU time (events around the graph
  // launch), the GPU time from one replay's end to the next one's start (the top-k and its copy,
  // and any wait on the host), and the host time from one replay launch to the next; medians
  // printed to stderr at exit. Events of kRing replays are kept; replay i collects replay i - 2's.
  struct Timing {
    static constexpr size_t kRing = 4;
    cudaEvent_t start[kRing] = {}, stop[kRing] = {};
    size_t replays = 0;
    std::chrono::steady_clock::time_point last{};
    std::vector<float> gpu_us, gap_us, launch_us;
    ~Timing();
  };
  void time_replay_begin();
  void time_replay_end();
  std::unique_ptr<Timing> timing_;

  cudaStream_t stream_;
  Mode mode_ = Mode::eager;
  Entry* cur_ = nullptr;
  size_t piece_ = 0;  // index into cur_->sizes while replaying
  char* hosts_[2] = {nullptr, nullptr};
  cudaEvent_t left_[2] = {nullptr, nullptr};  // recorded when buffer b stops being current
  int buf_ = 0;                               // the current host buffer
  char* host() const { return hosts_[buf_]; }
  char* dev_ = nullptr;
  size_t cap_ = 0, cursor_ = 0;
  std::unordered_map<uint64_t, Entry> steps_;
  // Eager pieces by content (views into host()) -> their offset; valid until the cursor restarts.
  std::unordered_map<std::string_view, size_t> memo_;
  void restart() {
    cursor_ = 0;
    memo_.clear();
  }
};

}  // namespace lithe::cuda_backend
