#include "lithe/core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace lithe {

namespace {
thread_local bool t_inside_pool_job = false;  // set while a thread runs a pool job
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
    std::function<void(int)> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      start_cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    t_inside_pool_job = true;
    job(index);
    t_inside_pool_job = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
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
  struct InsideJob {
    InsideJob() { t_inside_pool_job = true; }
    ~InsideJob() { t_inside_pool_job = false; }
  };
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = fn;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  {
    InsideJob inside;
    fn(0);
  }
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [&] { return pending_ == 0; });
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
