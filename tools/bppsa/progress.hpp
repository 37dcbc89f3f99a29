// A terminal progress bar with rate and ETA (redrawn in place on a TTY, a line every 10 %
// otherwise so that logs stay readable).
#pragma once

#include <chrono>
#include <cmath>
#include <string>

namespace bppsa::cli {

class ProgressBar {
 public:
  /// `unit` names what is counted ("batch"); disabled bars print nothing.
  ProgressBar(std::string label, std::string unit, bool enabled);
  /// A NaN loss (steps that have none, e.g. simulate's calibration) is left out.
  void update(long done, long total, double loss = NAN);
  /// Ends the line (TTY).
  void finish();

 private:
  std::string label_, unit_;
  bool enabled_, tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int last_decile_ = -1;
  bool drawn_ = false;
};

/// "1:02:03" / "02:03".
std::string format_duration(double seconds);

}  // namespace bppsa::cli
