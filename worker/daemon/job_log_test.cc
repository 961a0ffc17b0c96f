// The worker's job log: the line format, reading after a sequence number in
// pages, waiting for a line, the per-job and per-worker bounds (oldest lines
// and least recently written jobs go first), message cuts at a character
// boundary, and lines echoed as they are written.
#include "worker/daemon/job_log.h"

#include <cstdio>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(JobLogTest, FormatsOneStructuredLine) {
  v1::LogLine line;
  line.set_time_unix_ms(1'795'392'000'123);  // 2026-11-23T00:00:00.123Z
  line.set_severity(v1::WARNING);
  line.set_job_id("job-3");
  line.set_rank(1);
  line.set_step(42);
  line.set_message("aborting: test");
  EXPECT_EQ(FormatLogLine(line),
            "2026-11-23T00:00:00.123Z WARNING job=job-3 rank=1 step=42 aborting: test");
  line.set_step(-1);
  line.set_severity(v1::INFO);
  EXPECT_EQ(FormatLogLine(line),
            "2026-11-23T00:00:00.123Z INFO job=job-3 rank=1 step=- aborting: test");
}

TEST(JobLogTest, ReadsAfterASequenceInPages) {
  JobLog log(nullptr);
  for (int i = 0; i < 5; ++i) log.Write(v1::INFO, "job-1", 0, i, "line " + std::to_string(i));
  log.Write(v1::INFO, "job-2", 1, -1, "other job");
  JobLog::Batch first = log.Read("job-1", 0, 3, absl::ZeroDuration());
  ASSERT_TRUE(first.known);
  ASSERT_EQ(first.lines.size(), 3u);
  EXPECT_EQ(first.lines[0].message(), "line 0");
  EXPECT_EQ(first.lines[0].sequence(), 1);
  EXPECT_EQ(first.next_sequence, 3);
  JobLog::Batch rest = log.Read("job-1", first.next_sequence, 100, absl::ZeroDuration());
  ASSERT_EQ(rest.lines.size(), 2u);
  EXPECT_EQ(rest.lines[1].message(), "line 4");
  EXPECT_EQ(rest.lines[1].step(), 4);
  EXPECT_EQ(rest.next_sequence, 5);
  JobLog::Batch none = log.Read("job-1", 5, 100, absl::ZeroDuration());
  EXPECT_TRUE(none.lines.empty());
  EXPECT_EQ(none.next_sequence, 5);
  JobLog::Batch unknown = log.Read("job-9", 0, 100, absl::ZeroDuration());
  EXPECT_FALSE(unknown.known);
  EXPECT_TRUE(unknown.lines.empty());
}

TEST(JobLogTest, ReadWaitsForTheNextLine) {
  JobLog log(nullptr);
  log.Write(v1::INFO, "job-1", 0, -1, "first");
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    log.Write(v1::INFO, "job-1", 0, 0, "second");
  });
  JobLog::Batch batch = log.Read("job-1", 1, 10, absl::Seconds(30));
  writer.join();
  ASSERT_EQ(batch.lines.size(), 1u);
  EXPECT_EQ(batch.lines[0].message(), "second");
}

TEST(JobLogTest, KeepsTheNewestLinesOfTheMostRecentJobs) {
  JobLog log(nullptr, /*max_lines_per_job=*/3, /*max_jobs=*/2);
  for (int i = 1; i <= 5; ++i) log.Write(v1::INFO, "job-1", 0, i, "x");
  JobLog::Batch kept = log.Read("job-1", 0, 100, absl::ZeroDuration());
  ASSERT_EQ(kept.lines.size(), 3u);
  EXPECT_EQ(kept.lines[0].sequence(), 3);  // 1 and 2 were dropped
  log.Write(v1::INFO, "job-2", 0, -1, "y");
  log.Write(v1::INFO, "job-1", 0, -1, "job-1 written again");
  log.Write(v1::INFO, "job-3", 0, -1, "z");  // evicts job-2, the least recently written
  EXPECT_FALSE(log.Read("job-2", 0, 100, absl::ZeroDuration()).known);
  EXPECT_TRUE(log.Read("job-1", 0, 100, absl::ZeroDuration()).known);
  EXPECT_TRUE(log.Read("job-3", 0, 100, absl::ZeroDuration()).known);
}

TEST(JobLogTest, LongMessagesAreCutAtACharacterBoundary) {
  JobLog log(nullptr);
  std::string message(JobLog::kMaxMessageBytes - 1, 'a');
  message += "\xc3\xa9\xc3\xa9";  // two 2-byte characters across the cut
  log.Write(v1::ERROR, "job-1", 0, -1, message);
  const std::string got = log.Read("job-1", 0, 1, absl::ZeroDuration()).lines.at(0).message();
  EXPECT_EQ(got, std::string(JobLog::kMaxMessageBytes - 1, 'a') + "...");
}

TEST(JobLogTest, EchoesEachLineInTheSameFormat) {
  std::FILE* echo = std::tmpfile();
  ASSERT_NE(echo, nullptr);
  JobLog log(echo);
  log.Write(v1::ERROR, "job-7", 2, 9, "RunSteps failed: ABORTED: peer gone");
  std::rewind(echo);
  char buffer[512] = {0};
  ASSERT_NE(std::fgets(buffer, sizeof(buffer), echo), nullptr);
  const v1::LogLine line = log.Read("job-7", 0, 1, absl::ZeroDuration()).lines.at(0);
  EXPECT_EQ(std::string(buffer), FormatLogLine(line) + "\n");
  EXPECT_NE(std::string(buffer).find("ERROR job=job-7 rank=2 step=9 RunSteps failed"),
            std::string::npos);
  std::fclose(echo);
}

}  // namespace
}  // namespace tessera
