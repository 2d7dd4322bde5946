// Progress for long work. On a terminal: one line redrawn in place with a bar, rate and ETA.
// In a log or pipe: a plain line at most every few seconds and at every 10%, never a '\r'.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace lithe {

class Progress {
 public:
  // total <= 0 means unknown (no bar, no ETA). `out` defaults to stderr.
  Progress(std::string label, int64_t total, std::FILE* out = nullptr);
  ~Progress();  // finishes the line if finish() was not called
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void set(int64_t done, const std::string& note = {});
  void advance(int64_t n = 1, const std::string& note = {}) { set(done_ + n, note); }
  void finish(const std::string& note = {});

  // Exposed for tests: the text that would be printed for this state.
  static std::string render(const std::string& label, int64_t done, int64_t total, double elapsed_s,
                            const std::string& note, bool tty);

 private:
  void draw(bool final_line);

  std::string label_;
  int64_t total_;
  int64_t done_ = 0;
  std::string note_;
  std::FILE* out_;
  bool tty_;
  bool finished_ = false;
  int last_decile_ = -1;
  int64_t last_drawn_done_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace lithe
