// The coordinator's durable store: job records, each job's event history
// and a few counters (the next job number), in one SQLite database in WAL
// mode. This file and job_store.cc are the only code that sees SQLite.
//
// Every call is one transaction, so a record and the event that changed it
// (PutJobWithEvent) land together or not at all. synchronous=NORMAL: a
// committed transaction survives the coordinator being killed (kill -9); a
// power loss may drop the last few. Thread-compatible: the coordinator
// serialises calls under its mutex.
#ifndef TESSERA_SERVER_JOB_STORE_H_
#define TESSERA_SERVER_JOB_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/tessera/v1/coordinator.pb.h"

namespace tessera {

class JobStore {
 public:
  // Opens the database at `path`, creating it and its tables if needed.
  // DATA_LOSS if the file is not a usable database.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  absl::Status PutJob(const v1::Job& job);
  // The record and one event of it, atomically.
  absl::Status PutJobWithEvent(const v1::Job& job, const v1::JobEvent& event);
  absl::Status AppendEvent(const std::string& job_id, const v1::JobEvent& event);
  // Removes the job's record and every event of it.
  absl::Status DeleteJob(const std::string& job_id);
  // Keeps the job's newest `keep` step events (other events are all kept).
  absl::Status TrimStepEvents(const std::string& job_id, int64_t keep);

  absl::Status SetCounter(const std::string& name, int64_t value);
  // `fallback` when the counter was never set.
  absl::StatusOr<int64_t> Counter(const std::string& name, int64_t fallback);

  struct StoredJob {
    v1::Job job;
    std::vector<v1::JobEvent> events;  // by sequence
  };
  // Every job with its events. A record or event that does not parse is
  // skipped (and named in `skipped`) rather than failing the whole load.
  absl::StatusOr<std::vector<StoredJob>> LoadAll(std::vector<std::string>* skipped = nullptr);

 private:
  struct Db;
  explicit JobStore(std::unique_ptr<Db> db);
  std::unique_ptr<Db> db_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_JOB_STORE_H_
