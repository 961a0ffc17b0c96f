// The SQLite job store on a real file: records, events and counters survive
// reopening, a record and its event commit together, deleting a job removes
// its events, trimming keeps the newest step events and every other event,
// and a file that is not a database is DATA_LOSS naming it.
#include "server/job_store.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

std::string Path(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

v1::Job Job(const std::string& id, v1::JobState state) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  job.set_restarts(2);
  job.set_committed_step(10);
  return job;
}

v1::JobEvent StepEvent(int64_t sequence, int step) {
  v1::JobEvent e;
  e.set_sequence(sequence);
  e.mutable_step()->set_step(step);
  e.mutable_step()->set_loss(1.5f + step);
  return e;
}

v1::JobEvent StateEvent(int64_t sequence, v1::JobState state) {
  v1::JobEvent e;
  e.set_sequence(sequence);
  e.mutable_state_change()->set_state(state);
  e.mutable_state_change()->set_reason("why");
  return e;
}

TEST(JobStore, EverythingSurvivesReopening) {
  const std::string path = Path("reopen.db");
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutJobWithEvent(Job("job-1", v1::PENDING), StateEvent(1, v1::PENDING)).ok());
    ASSERT_TRUE((*store)->AppendEvent("job-1", StepEvent(2, 0)).ok());
    ASSERT_TRUE((*store)->PutJobWithEvent(Job("job-1", v1::RUNNING), StateEvent(3, v1::RUNNING)).ok());
    ASSERT_TRUE((*store)->PutJob(Job("job-2", v1::SUCCEEDED)).ok());
    ASSERT_TRUE((*store)->SetCounter("next_job_number", 3).ok());
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto loaded = (*store)->LoadAll();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  const JobStore::StoredJob& first = (*loaded)[0];
  EXPECT_EQ(first.job.id(), "job-1");
  EXPECT_EQ(first.job.state(), v1::RUNNING);
  EXPECT_EQ(first.job.restarts(), 2);
  EXPECT_EQ(first.job.committed_step(), 10);
  ASSERT_EQ(first.events.size(), 3u);
  EXPECT_EQ(first.events[1].step().loss(), 1.5f);
  EXPECT_EQ(first.events[2].state_change().state(), v1::RUNNING);
  EXPECT_TRUE((*loaded)[1].events.empty());
  EXPECT_EQ(*(*store)->Counter("next_job_number", 1), 3);
  EXPECT_EQ(*(*store)->Counter("unset", 7), 7);
}

TEST(JobStore, DeleteRemovesTheRecordAndItsEvents) {
  auto store = JobStore::Open(Path("delete.db"));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->PutJobWithEvent(Job("job-1", v1::FAILED), StateEvent(1, v1::FAILED)).ok());
  ASSERT_TRUE((*store)->PutJobWithEvent(Job("job-2", v1::FAILED), StateEvent(1, v1::FAILED)).ok());
  ASSERT_TRUE((*store)->DeleteJob("job-1").ok());
  auto loaded = (*store)->LoadAll();
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].job.id(), "job-2");
  EXPECT_EQ((*loaded)[0].events.size(), 1u);
}

TEST(JobStore, TrimKeepsTheNewestStepEventsAndEveryOtherEvent) {
  auto store = JobStore::Open(Path("trim.db"));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->PutJobWithEvent(Job("job-1", v1::RUNNING), StateEvent(1, v1::RUNNING)).ok());
  for (int s = 0; s < 10; ++s) ASSERT_TRUE((*store)->AppendEvent("job-1", StepEvent(2 + s, s)).ok());
  ASSERT_TRUE((*store)->TrimStepEvents("job-1", 3).ok());
  auto loaded = (*store)->LoadAll();
  const std::vector<v1::JobEvent>& events = (*loaded)[0].events;
  ASSERT_EQ(events.size(), 4u);
  EXPECT_TRUE(events[0].has_state_change());
  EXPECT_EQ(events[1].step().step(), 7);
  EXPECT_EQ(events[3].step().step(), 9);
}

TEST(JobStore, AFileThatIsNotADatabaseIsDataLossNamingIt) {
  const std::string path = Path("garbage.db");
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string(4096, 'x');
  }
  auto store = JobStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status();
}

}  // namespace
}  // namespace tessera
