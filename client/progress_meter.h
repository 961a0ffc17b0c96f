// Progress of a long local job (tokenizing a corpus) on standard error: on
// a terminal, a bar redrawn in place at most four times a second with bytes
// done and total, MB/s and the time left; otherwise (a log file, a pipe)
// a plain line every 10 seconds. The clock is passed in so tests can step it.
#ifndef TESSERA_CLIENT_PROGRESS_METER_H_
#define TESSERA_CLIENT_PROGRESS_METER_H_

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessera {

class ProgressMeter {
 public:
  // total_bytes < 0: unknown (standard input), so no percentage or ETA.
  ProgressMeter(std::ostream& out, bool terminal, int64_t total_bytes,
                std::function<absl::Time()> now = absl::Now);

  // Bytes of the total done so far; draws when it is time to.
  void Update(int64_t done_bytes);
  // Clears the bar (on a terminal) so a summary line can follow.
  void Clear();
  // Seconds since the meter was made.
  double ElapsedSeconds() const;

 private:
  std::string Line(int64_t done_bytes, bool bar) const;

  std::ostream& out_;
  const bool terminal_;
  const int64_t total_bytes_;
  const std::function<absl::Time()> now_;
  const absl::Time start_;
  absl::Time last_drawn_;
  bool drawn_ = false;
};

// "12.3 MB" (decimal megabytes, as MB/s figures use).
std::string FormatMegabytes(int64_t bytes);

}  // namespace tessera

#endif  // TESSERA_CLIENT_PROGRESS_METER_H_
