// The progress bar redraws in place at most four times a second with bytes,
// MB/s and ETA; plain lines come every 10 seconds; unknown totals show no
// ETA. A stepped clock makes it deterministic.
#include "client/progress_meter.h"

#include <sstream>

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(ProgressMeter, TerminalBarIsThrottledAndShowsRateAndEta) {
  absl::Time now = absl::UnixEpoch();
  std::ostringstream out;
  ProgressMeter meter(out, /*terminal=*/true, 100'000'000, [&] { return now; });
  now += absl::Milliseconds(100);
  meter.Update(1'000'000);
  EXPECT_EQ(out.str(), "");  // too soon
  now += absl::Milliseconds(900);
  meter.Update(10'000'000);  // 10 MB in 1 s
  const std::string bar = out.str();
  EXPECT_EQ(bar.substr(0, 1), "\r");
  EXPECT_NE(bar.find("10.0 MB of 100.0 MB (10%)"), std::string::npos) << bar;
  EXPECT_NE(bar.find("10.0 MB/s"), std::string::npos) << bar;
  EXPECT_NE(bar.find("ETA 0:09"), std::string::npos) << bar;
  EXPECT_NE(bar.find("[###......"), std::string::npos) << bar;
  EXPECT_EQ(bar.find('\n'), std::string::npos) << bar;
  meter.Clear();
  EXPECT_EQ(out.str().substr(bar.size()), "\r\x1b[K");
}

TEST(ProgressMeter, PlainLinesComeEveryTenSeconds) {
  absl::Time now = absl::UnixEpoch();
  std::ostringstream out;
  ProgressMeter meter(out, /*terminal=*/false, -1, [&] { return now; });
  for (int i = 1; i <= 40; ++i) {
    now += absl::Seconds(1);
    meter.Update(i * 2'000'000);
  }
  const std::string lines = out.str();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 4) << lines;
  EXPECT_NE(lines.find("tokenizing: 20.0 MB, 2.0 MB/s\n"), std::string::npos) << lines;
  EXPECT_EQ(lines.find("ETA"), std::string::npos) << lines;
  EXPECT_EQ(lines.find('\r'), std::string::npos) << lines;
  meter.Clear();
  EXPECT_EQ(out.str(), lines);
}

}  // namespace
}  // namespace tessera
