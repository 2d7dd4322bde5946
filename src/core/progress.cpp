#include "lithe/core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

namespace lithe {
namespace {

std::string fmt_duration(double s) {
  if (s < 0 || s > 1e7) return "?";
  const auto t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

}  // namespace

Progress::Progress(std::string label, int64_t total, std::FILE* out)
    : label_(std::move(label)),
      total_(total),
      out_(out ? out : stderr),
      tty_(isatty(fileno(out_)) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() {
  if (!finished_) finish();
}

std::string Progress::render(const std::string& label, int64_t done, int64_t total, double elapsed,
                             const std::string& note, bool tty) {
  std::string s = label;
  if (total > 0) {
    const double frac = std::clamp(static_cast<double>(done) / static_cast<double>(total), 0.0, 1.0);
    if (tty) {
      constexpr int kWidth = 24;
      const int fill = static_cast<int>(frac * kWidth);
      s += fmt::format(" [{}{}]", std::string(static_cast<size_t>(fill), '#'),
                       std::string(static_cast<size_t>(kWidth - fill), '.'));
    }
    s += fmt::format(" {}/{} ({:.0f}%)", done, total, frac * 100.0);
    const double eta = done > 0 ? elapsed * static_cast<double>(total - done) / static_cast<double>(done) : -1;
    s += fmt::format(" elapsed {} eta {}", fmt_duration(elapsed), done >= total ? "0s" : fmt_duration(eta));
  } else {
    s += fmt::format(" {} elapsed {}", done, fmt_duration(elapsed));
  }
  if (!note.empty()) s += " " + note;
  return s;
}

void Progress::set(int64_t done, const std::string& note) {
  done_ = done;
  if (!note.empty()) note_ = note;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (tty_) {
    if (since >= 0.1) draw(false);
    return;
  }
  const int decile = total_ > 0 ? static_cast<int>(10 * done_ / total_) : -1;
  if (since >= 5.0 || decile > last_decile_) {
    last_decile_ = decile;
    draw(false);
  }
}

void Progress::finish(const std::string& note) {
  if (finished_) return;
  finished_ = true;
  if (!note.empty()) note_ = note;
  if (!tty_ && last_drawn_done_ == done_ && note.empty()) return;  // the log already has this line
  draw(true);
}

void Progress::draw(bool final_line) {
  last_draw_ = std::chrono::steady_clock::now();
  last_drawn_done_ = done_;
  const double elapsed = std::chrono::duration<double>(last_draw_ - start_).count();
  const std::string line = render(label_, done_, total_, elapsed, note_, tty_);
  if (tty_)
    std::fprintf(out_, "\r\033[K%s%s", line.c_str(), final_line ? "\n" : "");
  else
    std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

}  // namespace lithe
