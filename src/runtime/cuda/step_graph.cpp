#include "step_graph.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace lithe::cuda_backend {

Status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return error(StatusCode::internal, "{} failed: {} ({})", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

namespace {
float median(std::vector<float> v) {
  if (v.empty()) return 0.f;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}
}  // namespace

StepGraph::StepGraph(cudaStream_t s) : stream_(s) {
  const char* e = std::getenv("LITHE_STEP_TIMES");
  if (e == nullptr || std::strcmp(e, "1") != 0) return;
  timing_ = std::make_unique<Timing>();
  if (cudaEventCreate(&timing_->start) != cudaSuccess || cudaEventCreate(&timing_->stop) != cudaSuccess)
    timing_.reset();
}

void StepGraph::Timing::lap(size_t piece) {
  const auto now = std::chrono::steady_clock::now();
  if (synced > last) {  // a replay that follows a fetch of results
    if (piece_us.size() <= piece) piece_us.resize(piece + 1);
    piece_us[piece].push_back(std::chrono::duration<float, std::micro>(now - mark).count());
  }
  mark = now;
}

// Called at a replay's graph launch: collects the previous replay's GPU time, starts this one's.
void StepGraph::time_replay_begin() {
  Timing& t = *timing_;
  const auto now = std::chrono::steady_clock::now();
  if (t.pending) {
    float ms = 0.f;
    if (cudaEventSynchronize(t.stop) == cudaSuccess && cudaEventElapsedTime(&ms, t.start, t.stop) == cudaSuccess) {
      t.gpu_us.push_back(ms * 1000.f);
      t.launch_us.push_back(std::chrono::duration<float, std::micro>(now - t.last).count());
      if (t.synced > t.last) t.host_us.push_back(std::chrono::duration<float, std::micro>(now - t.synced).count());
    }
  }
  t.lap(piece_);  // the last piece to the launch
  t.last = now;
  cudaEventRecord(t.start, stream_);
}
void StepGraph::time_replay_end() {
  cudaEventRecord(timing_->stop, stream_);
  timing_->pending = true;
}

StepGraph::~StepGraph() {
  if (timing_ != nullptr) {
    std::fprintf(stderr, "step times: %zu replays, GPU %.1f us, launch to launch %.1f us, sync to launch %.1f us (medians)\n",
                 timing_->gpu_us.size(), median(timing_->gpu_us), median(timing_->launch_us), median(timing_->host_us));
    // Where the host time between a sync and the next launch goes: the slowest stretches.
    std::vector<std::pair<float, size_t>> laps;
    for (size_t i = 0; i < timing_->piece_us.size(); ++i) laps.emplace_back(median(timing_->piece_us[i]), i);
    std::sort(laps.rbegin(), laps.rend());
    std::fprintf(stderr, "host stretches before piece (median us; %zu pieces, the last one = launch):", laps.size());
    for (size_t i = 0; i < std::min<size_t>(laps.size(), 8); ++i) std::fprintf(stderr, " #%zu %.1f", laps[i].second, laps[i].first);
    std::fprintf(stderr, "\n");
    cudaEventDestroy(timing_->start);
    cudaEventDestroy(timing_->stop);
  }
  for (auto& [k, e] : steps_)
    if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  if (host_ != nullptr) cudaFreeHost(host_);
  if (dev_ != nullptr) cudaFree(dev_);
}

Status StepGraph::forget() {
  if (mode_ != Mode::eager)
    return error(StatusCode::internal, "a scratch buffer grew inside a captured or replayed step");
  LITHE_TRY(check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  for (auto& [k, e] : steps_)
    if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  steps_.clear();
  cur_ = nullptr;
  return Status::ok();
}

Status StepGraph::reserve(size_t bytes) {
  if (bytes <= cap_) return Status::ok();
  if (mode_ != Mode::eager)
    return error(StatusCode::internal, "step staging of {} bytes outgrew its {} bytes inside a captured step", bytes,
                 cap_);
  LITHE_TRY(check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  // Captured graphs point into the old buffers: they are dropped with them.
  for (auto& [k, e] : steps_)
    if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  steps_.clear();
  if (host_ != nullptr) cudaFreeHost(host_);
  if (dev_ != nullptr) cudaFree(dev_);
  host_ = dev_ = nullptr;
  cap_ = std::max<size_t>(bytes, 1 << 20);
  LITHE_TRY(check(cudaMallocHost(&host_, cap_), "cudaMallocHost (staging)"));
  LITHE_TRY(check(cudaMalloc(&dev_, cap_), "cudaMalloc (staging)"));
  restart();
  return Status::ok();
}

Result<const void*> StepGraph::stage(const void* host, size_t bytes) {
  constexpr size_t kMemoMax = 4096;  // larger pieces (whole position arrays) are not looked up
  const bool memo = mode_ == Mode::eager && bytes > 0 && bytes <= kMemoMax;
  if (memo) {
    auto it = memo_.find(std::string_view(static_cast<const char*>(host), bytes));
    if (it != memo_.end()) return static_cast<const void*>(dev_ + it->second);
  }
  size_t at = (cursor_ + 15) & ~size_t{15};
  if (at + bytes > cap_) {
    if (mode_ != Mode::eager)
      return error(StatusCode::internal, "a captured step staged more than its {} bytes of host arguments", cap_);
    LITHE_TRY(check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));  // earlier pieces are consumed
    restart();
    at = 0;
    LITHE_TRY(reserve(bytes));
  }
  if (mode_ == Mode::replay) {
    if (piece_ >= cur_->sizes.size() || cur_->sizes[piece_] != bytes)
      return error(StatusCode::internal, "a replayed step staged {} bytes as piece {}, its capture staged {}", bytes,
                   piece_, piece_ < cur_->sizes.size() ? cur_->sizes[piece_] : 0);
    if (timing_ != nullptr) timing_->lap(piece_);
    ++piece_;
  } else if (mode_ == Mode::capture) {
    cur_->sizes.push_back(bytes);
  }
  if (bytes > 0) std::memcpy(host_ + at, host, bytes);
  if (mode_ == Mode::eager && bytes > 0)
    LITHE_TRY(check(cudaMemcpyAsync(dev_ + at, host_ + at, bytes, cudaMemcpyHostToDevice, stream_), "staging upload"));
  cursor_ = at + bytes;
  if (memo) memo_.emplace(std::string_view(host_ + at, bytes), at);
  return static_cast<const void*>(dev_ + at);
}

Status StepGraph::begin(uint64_t key) {
  if (mode_ != Mode::eager) return error(StatusCode::internal, "begin_step inside a step");
  LITHE_TRY(reserve(1 << 20));
  LITHE_TRY(check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  restart();
  if (steps_.size() >= kMaxSteps && steps_.find(key) == steps_.end()) {  // caches come and go: start afresh
    for (auto& [k, e] : steps_)
      if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
    steps_.clear();
  }
  cur_ = &steps_[key];
  cur_->seen++;
  if (cur_->exec != nullptr) {
    mode_ = Mode::replay;
    piece_ = 0;
  } else if (cur_->seen >= 2) {
    mode_ = Mode::capture;
    cur_->sizes.clear();
    LITHE_TRY(check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture"));
    // The step's one upload; its size is fixed at end().
    LITHE_TRY(check(cudaMemcpyAsync(dev_, host_, cap_, cudaMemcpyHostToDevice, stream_), "staging upload (capture)"));
  }
  return Status::ok();
}

Status StepGraph::end(bool run) {
  const Mode m = mode_;
  mode_ = Mode::eager;
  if (m == Mode::replay) {
    if (!run) return Status::ok();
    if (piece_ != cur_->sizes.size())
      return error(StatusCode::internal, "a replayed step staged {} pieces, its capture {}", piece_,
                   cur_->sizes.size());
    if (timing_ == nullptr) return check(cudaGraphLaunch(cur_->exec, stream_), "cudaGraphLaunch");
    time_replay_begin();
    LITHE_TRY(check(cudaGraphLaunch(cur_->exec, stream_), "cudaGraphLaunch"));
    time_replay_end();
    return Status::ok();
  }
  if (m != Mode::capture) return Status::ok();
  cudaGraph_t graph = nullptr;
  LITHE_TRY(check(cudaStreamEndCapture(stream_, &graph), "cudaStreamEndCapture"));
  if (!run) {
    cudaGraphDestroy(graph);
    cur_->seen = 0;
    return Status::ok();
  }
  // Shrink the leading upload (the graph's only root) to what the step staged.
  size_t n_roots = 1;
  cudaGraphNode_t root = nullptr;
  Status st = check(cudaGraphGetRootNodes(graph, &root, &n_roots), "cudaGraphGetRootNodes");
  if (st.is_ok() && n_roots != 1) st = error(StatusCode::internal, "captured step has {} roots, expected 1", n_roots);
  if (st.is_ok())
    st = check(cudaGraphMemcpyNodeSetParams1D(root, dev_, host_, std::max<size_t>(cursor_, 16),
                                              cudaMemcpyHostToDevice),
               "cudaGraphMemcpyNodeSetParams1D");
  if (st.is_ok()) st = check(cudaGraphInstantiate(&cur_->exec, graph, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(graph);
  LITHE_TRY(st);
  return check(cudaGraphLaunch(cur_->exec, stream_), "cudaGraphLaunch");
}

}  // namespace lithe::cuda_backend
