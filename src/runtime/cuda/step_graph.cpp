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
  for (cudaEvent_t& e : left_) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  const char* e = std::getenv("LITHE_STEP_TIMES");
  if (e == nullptr || std::strcmp(e, "1") != 0) return;
  timing_ = std::make_unique<Timing>();
  for (size_t i = 0; i < Timing::kRing; ++i)
    if (cudaEventCreate(&timing_->start[i]) != cudaSuccess || cudaEventCreate(&timing_->stop[i]) != cudaSuccess) {
      timing_.reset();
      return;
    }
}

StepGraph::Timing::~Timing() {
  std::fprintf(stderr, "step times: %zu replays, GPU %.1f us per step, %.1f us between steps, launch to launch "
               "%.1f us (medians)\n", gpu_us.size(), median(gpu_us), median(gap_us), median(launch_us));
  for (size_t i = 0; i < kRing; ++i) {
    if (start[i] != nullptr) cudaEventDestroy(start[i]);
    if (stop[i] != nullptr) cudaEventDestroy(stop[i]);
  }
}

// At replay i's launch: collects replay i - 2 (long finished in a decode loop two steps deep) and
// the gap after replay i - 3, then starts replay i's events.
void StepGraph::time_replay_begin() {
  Timing& t = *timing_;
  const auto now = std::chrono::steady_clock::now();
  const size_t i = t.replays, R = Timing::kRing;
  if (i >= 1) t.launch_us.push_back(std::chrono::duration<float, std::micro>(now - t.last).count());
  if (i >= 2 && cudaEventSynchronize(t.stop[(i - 2) % R]) == cudaSuccess) {
    float ms = 0.f;
    if (cudaEventElapsedTime(&ms, t.start[(i - 2) % R], t.stop[(i - 2) % R]) == cudaSuccess)
      t.gpu_us.push_back(ms * 1000.f);
    if (i >= 3 && cudaEventElapsedTime(&ms, t.stop[(i - 3) % R], t.start[(i - 2) % R]) == cudaSuccess)
      t.gap_us.push_back(ms * 1000.f);
  }
  t.last = now;
  cudaEventRecord(t.start[i % R], stream_);
}
void StepGraph::time_replay_end() {
  cudaEventRecord(timing_->stop[timing_->replays % Timing::kRing], stream_);
  ++timing_->replays;
}

StepGraph::~StepGraph() {
  if (timing_ != nullptr) cudaStreamSynchronize(stream_);
  timing_.reset();
  drop_graphs();
  for (cudaEvent_t e : left_)
    if (e != nullptr) cudaEventDestroy(e);
  for (char* h : hosts_)
    if (h != nullptr) cudaFreeHost(h);
  if (dev_ != nullptr) cudaFree(dev_);
}

void StepGraph::drop_graphs() {
  for (auto& [k, e] : steps_)
    for (cudaGraphExec_t x : e.exec)
      if (x != nullptr) cudaGraphExecDestroy(x);
  steps_.clear();
  cur_ = nullptr;
}

Status StepGraph::forget() {
  if (mode_ != Mode::eager)
    return error(StatusCode::internal, "a scratch buffer grew inside a captured or replayed step");
  LITHE_TRY(check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  drop_graphs();
  return Status::ok();
}

Status StepGraph::reserve(size_t bytes) {
  if (bytes <= cap_) return Status::ok();
  if (mode_ != Mode::eager)
    return error(StatusCode::internal, "step staging of {} bytes outgrew its {} bytes inside a captured step", bytes,
                 cap_);
  LITHE_TRY(check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  drop_graphs();  // they point into the old buffers
  for (char*& h : hosts_) {
    if (h != nullptr) cudaFreeHost(h);
    h = nullptr;
  }
  if (dev_ != nullptr) cudaFree(dev_);
  dev_ = nullptr;
  cap_ = 0;
  const size_t cap = std::max<size_t>(bytes, 1 << 20);
  for (char*& h : hosts_) LITHE_TRY(check(cudaMallocHost(&h, cap), "cudaMallocHost (staging)"));
  LITHE_TRY(check(cudaMalloc(&dev_, cap), "cudaMalloc (staging)"));
  cap_ = cap;
  restart();
  return Status::ok();
}

Status StepGraph::use_other_buffer() {
  LITHE_TRY(check(cudaEventRecord(left_[buf_], stream_), "cudaEventRecord"));
  buf_ ^= 1;
  restart();
  return check(cudaEventSynchronize(left_[buf_]), "cudaEventSynchronize");
}

Result<const void*> StepGraph::stage(const void* src, size_t bytes) {
  constexpr size_t kMemoMax = 4096;  // larger pieces (whole position arrays) are not looked up
  const bool memo = mode_ == Mode::eager && bytes > 0 && bytes <= kMemoMax;
  if (memo) {
    auto it = memo_.find(std::string_view(static_cast<const char*>(src), bytes));
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
    ++piece_;
  } else if (mode_ == Mode::capture) {
    cur_->sizes.push_back(bytes);
  }
  if (bytes > 0) std::memcpy(host() + at, src, bytes);
  if (mode_ == Mode::eager && bytes > 0)
    LITHE_TRY(check(cudaMemcpyAsync(dev_ + at, host() + at, bytes, cudaMemcpyHostToDevice, stream_), "staging upload"));
  cursor_ = at + bytes;
  if (memo) memo_.emplace(std::string_view(host() + at, bytes), at);
  return static_cast<const void*>(dev_ + at);
}

Status StepGraph::begin(uint64_t key) {
  if (mode_ != Mode::eager) return error(StatusCode::internal, "begin_step inside a step");
  LITHE_TRY(reserve(1 << 20));
  if (steps_.size() >= kMaxSteps && steps_.find(key) == steps_.end()) {  // caches come and go: start afresh
    LITHE_TRY(check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
    drop_graphs();
  }
  cur_ = &steps_[key];
  cur_->seen++;
  if (cur_->exec[0] != nullptr) {
    mode_ = Mode::replay;
    piece_ = 0;
    return use_other_buffer();
  }
  LITHE_TRY(check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"));
  restart();
  if (cur_->seen >= 2) {
    mode_ = Mode::capture;
    cur_->sizes.clear();
    LITHE_TRY(check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture"));
    // The step's one upload; its size is fixed at end().
    LITHE_TRY(check(cudaMemcpyAsync(dev_, host(), cap_, cudaMemcpyHostToDevice, stream_), "staging upload (capture)"));
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
    if (timing_ == nullptr) return check(cudaGraphLaunch(cur_->exec[buf_], stream_), "cudaGraphLaunch");
    time_replay_begin();
    LITHE_TRY(check(cudaGraphLaunch(cur_->exec[buf_], stream_), "cudaGraphLaunch"));
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
  // Shrink the leading upload (the graph's only root) to what the step staged, and instantiate the
  // graph once per host buffer it may upload from.
  size_t n_roots = 1;
  cudaGraphNode_t root = nullptr;
  Status st = check(cudaGraphGetRootNodes(graph, &root, &n_roots), "cudaGraphGetRootNodes");
  if (st.is_ok() && n_roots != 1) st = error(StatusCode::internal, "captured step has {} roots, expected 1", n_roots);
  for (int b = 0; b < 2 && st.is_ok(); ++b) {
    st = check(cudaGraphMemcpyNodeSetParams1D(root, dev_, hosts_[b], std::max<size_t>(cursor_, 16),
                                              cudaMemcpyHostToDevice),
               "cudaGraphMemcpyNodeSetParams1D");
    if (st.is_ok()) st = check(cudaGraphInstantiate(&cur_->exec[b], graph, 0), "cudaGraphInstantiate");
  }
  cudaGraphDestroy(graph);
  if (!st.is_ok()) {
    for (cudaGraphExec_t& x : cur_->exec)
      if (x != nullptr) cudaGraphExecDestroy(x), x = nullptr;
    return st;
  }
  return check(cudaGraphLaunch(cur_->exec[buf_], stream_), "cudaGraphLaunch");
}

}  // namespace lithe::cuda_backend
