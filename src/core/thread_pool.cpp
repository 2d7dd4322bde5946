// Spin-then-sleep thread pool. Waking a sleeping thread costs tens of microseconds on the VMs we
// run on, longer than most decode-time matrix-vector products; so workers (and the waiting
// caller) spin on an atomic generation counter for up to kSpinMicros before blocking on a
// condition variable. The spin is bounded so an oversubscribed machine is not starved.
// Handshakes use sequentially consistent atomics: a sleeper registers (sleepers_) before it
// re-checks the generation, and the caller bumps the generation before it reads sleepers_, so
// one of the two always sees the other.
#include "lithe/core/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LITHE_CPU_RELAX() _mm_pause()
#else
#define LITHE_CPU_RELAX() std::this_thread::yield()
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>

namespace lithe {

namespace {
thread_local bool t_inside_pool_job = false;  // set while a thread runs a pool job
constexpr double kSpinMicros = 200.0;          // measured: wake-ups cost 15-80 us here

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Spins until pred() holds or the budget runs out; returns whether pred() held.
template <typename Pred>
bool spin_until(Pred pred) {
  const double t0 = now_us();
  for (int n = 1;; ++n) {
    if (pred()) return true;
    LITHE_CPU_RELAX();
    if ((n & 255) == 0 && now_us() - t0 > kSpinMicros) return pred();
  }
}
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  const int n = std::max(1, num_threads);
  for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return gen_.load() != seen; })) {
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);
      start_cv_.wait(lk, [&] { return stop_ || gen_.load() != seen; });
      sleepers_.fetch_sub(1);
      if (stop_) return;
    }
    seen = gen_.load();
    t_inside_pool_job = true;
    (*job_)(index);
    t_inside_pool_job = false;
    if (pending_.fetch_sub(1) == 1 && caller_waiting_.load()) {
      std::lock_guard<std::mutex> lk(mu_);
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  // A nested call from inside a job, or a pool of one, runs every index on this thread.
  if (workers_.empty() || t_inside_pool_job) {
    for (int i = 0; i < size(); ++i) fn(i);
    return;
  }
  // Concurrent callers (e.g. server request threads) take turns: one job in flight at a time.
  std::lock_guard<std::mutex> caller_lock(call_mu_);
  job_ = &fn;
  pending_.store(static_cast<int>(workers_.size()));
  gen_.fetch_add(1);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    start_cv_.notify_all();
  }
  t_inside_pool_job = true;
  fn(0);
  t_inside_pool_job = false;
  if (!spin_until([&] { return pending_.load() == 0; })) {
    std::unique_lock<std::mutex> lk(mu_);
    caller_waiting_.store(true);
    done_cv_.wait(lk, [&] { return pending_.load() == 0; });
    caller_waiting_.store(false);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int64_t threads = std::min<int64_t>(size(), max_chunks);
  if (threads <= 1) {
    fn(0, n);
    return;
  }
  run_on_all([&](int t) {
    if (t >= threads) return;
    const int64_t begin = n * t / threads;
    const int64_t end = n * (t + 1) / threads;
    if (begin < end) fn(begin, end);
  });
}

namespace {
std::mutex g_pool_mu;
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
int default_threads() {
  if (const char* env = std::getenv("LITHE_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}
}  // namespace

ThreadPool& global_pool() {
  std::lock_guard<std::mutex> lk(g_pool_mu);
  auto& p = pool_slot();
  if (!p) p = std::make_unique<ThreadPool>(default_threads());
  return *p;
}

void set_num_threads(int n) {
  std::lock_guard<std::mutex> lk(g_pool_mu);
  pool_slot() = std::make_unique<ThreadPool>(n > 0 ? n : default_threads());
}

}  // namespace lithe
