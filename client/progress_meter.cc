// Drawing the progress bar or lines (see progress_meter.h).
#include "client/progress_meter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera {
namespace {

constexpr absl::Duration kTerminalInterval = absl::Milliseconds(250);
constexpr absl::Duration kLineInterval = absl::Seconds(10);
constexpr int kBarWidth = 30;

std::string FormatDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return absl::StrFormat("%d:%02d", s / 60, s % 60);
}

}  // namespace

std::string FormatMegabytes(int64_t bytes) { return absl::StrFormat("%.1f MB", bytes / 1e6); }

ProgressMeter::ProgressMeter(std::ostream& out, bool terminal, int64_t total_bytes,
                             std::function<absl::Time()> now)
    : out_(out),
      terminal_(terminal),
      total_bytes_(total_bytes),
      now_(std::move(now)),
      start_(now_()),
      last_drawn_(start_) {}

double ProgressMeter::ElapsedSeconds() const { return absl::ToDoubleSeconds(now_() - start_); }

void ProgressMeter::Update(int64_t done_bytes) {
  const absl::Time now = now_();
  if (now - last_drawn_ < (terminal_ ? kTerminalInterval : kLineInterval)) return;
  last_drawn_ = now;
  if (terminal_) {
    out_ << "\r" << Line(done_bytes, /*bar=*/true) << "\x1b[K" << std::flush;
  } else {
    out_ << Line(done_bytes, /*bar=*/false) << "\n" << std::flush;
  }
  drawn_ = true;
}

void ProgressMeter::Clear() {
  if (terminal_ && drawn_) out_ << "\r\x1b[K" << std::flush;
  drawn_ = false;
}

std::string ProgressMeter::Line(int64_t done_bytes, bool bar) const {
  const double seconds = std::max(1e-9, ElapsedSeconds());
  const double rate = done_bytes / seconds;  // bytes per second
  std::string line;
  const bool known = total_bytes_ > 0;
  const double fraction = known ? std::min(1.0, static_cast<double>(done_bytes) / total_bytes_) : 0;
  if (bar && known) {
    const int filled = static_cast<int>(fraction * kBarWidth);
    absl::StrAppend(&line, "[", std::string(filled, '#'), std::string(kBarWidth - filled, '.'),
                    "] ");
  }
  if (!bar) absl::StrAppend(&line, "tokenizing: ");
  absl::StrAppend(&line, FormatMegabytes(done_bytes));
  if (known) {
    absl::StrAppend(&line, " of ", FormatMegabytes(total_bytes_),
                    absl::StrFormat(" (%d%%)", static_cast<int>(fraction * 100)));
  }
  absl::StrAppend(&line, absl::StrFormat(", %.1f MB/s", rate / 1e6));
  if (known && rate > 0) {
    absl::StrAppend(&line, ", ETA ", FormatDuration((total_bytes_ - done_bytes) / rate));
  }
  return line;
}

}  // namespace tessera
