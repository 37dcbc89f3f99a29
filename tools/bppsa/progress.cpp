// Progress bar drawing.
#include "progress.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace bppsa::cli {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", s / 60, s % 60);
  return buf;
}

ProgressBar::ProgressBar(std::string label, std::string unit, bool enabled)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void ProgressBar::update(long done, long total, double loss) {
  if (!enabled_ || total <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  const double eta = rate > 0 ? static_cast<double>(total - done) / rate : NAN;
  const int decile = static_cast<int>(10 * done / total);
  char loss_text[32] = "";
  if (!std::isnan(loss)) std::snprintf(loss_text, sizeof loss_text, " | loss %.4f", loss);
  if (tty_) {
    if (done < total && std::chrono::duration<double>(now - last_draw_).count() < 0.1) return;
    last_draw_ = now;
    constexpr int width = 30;
    const int fill = static_cast<int>(width * done / total);
    std::string bar(static_cast<std::size_t>(fill), '=');
    if (fill < width) bar += '>' + std::string(static_cast<std::size_t>(width - fill - 1), ' ');
    std::fprintf(stderr, "\r%s [%s] %ld/%ld %s %3d%% | %.1f %s/s%s | %s elapsed, ETA %s\033[K", label_.c_str(),
                 bar.c_str(), done, total, unit_.c_str(), static_cast<int>(100 * done / total), rate, unit_.c_str(),
                 loss_text, format_duration(elapsed).c_str(), format_duration(eta).c_str());
    drawn_ = true;
  } else if (decile != last_decile_ && (decile > 0 || done == total)) {
    last_decile_ = decile;
    std::fprintf(stderr, "%s %ld/%ld %s (%d%%) | %.1f %s/s%s | ETA %s\n", label_.c_str(), done, total,
                 unit_.c_str(), static_cast<int>(100 * done / total), rate, unit_.c_str(), loss_text,
                 format_duration(eta).c_str());
  }
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (enabled_ && tty_ && drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace bppsa::cli
