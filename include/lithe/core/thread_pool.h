// A fixed pool of worker threads with a blocking parallel_for. One global pool serves the whole
// process (sized by set_num_threads / LITHE_THREADS, default: hardware threads); kernels split
// work into contiguous ranges so each thread touches its own rows.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lithe {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }  // workers + the caller

  // Calls fn(begin, end) on disjoint chunks covering [0, n), at least `grain` items each;
  // the calling thread takes part. Blocks until all chunks are done. Thread-safe: concurrent
  // callers take turns; a call from inside a job runs its chunks inline on that thread.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  // Calls fn(thread_index) once on each of the size() threads.
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serialises concurrent callers
  std::mutex mu_;       // guards sleeping and stop_
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;  // the caller's job, alive until pending_ is 0
  std::atomic<uint64_t> gen_{0};                   // bumped per job; workers spin on it, then sleep
  std::atomic<int> pending_{0};                    // workers still running the current job
  std::atomic<int> sleepers_{0};                   // workers blocked on start_cv_
  std::atomic<bool> caller_waiting_{false};        // the caller blocked on done_cv_
  bool stop_ = false;
};

// The process-wide pool.
ThreadPool& global_pool();
// Resizes the global pool (n <= 0: hardware threads). Call before any parallel work starts:
// a reference from an earlier global_pool() call dangles afterwards.
void set_num_threads(int n);

}  // namespace lithe
