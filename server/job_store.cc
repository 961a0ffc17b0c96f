// The SQLite adapter behind JobStore (see job_store.h).
//
// Schema: jobs(id, record) holds each Job as serialized protobuf;
// events(job_id, sequence, is_step, event) each JobEvent; counters(name,
// value). Statements are prepared per call: the coordinator writes a few
// rows per step, far below what preparing costs.
#include "server/job_store.h"

#include <sqlite3.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera {

struct JobStore::Db {
  sqlite3* handle = nullptr;
  ~Db() {
    if (handle != nullptr) sqlite3_close(handle);
  }
};

namespace {

absl::Status Error(sqlite3* db, const std::string& what) {
  const int code = sqlite3_errcode(db);
  const std::string message = absl::StrCat("job store: ", what, ": ", sqlite3_errmsg(db));
  if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB) return absl::DataLossError(message);
  if (code == SQLITE_FULL) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::Status Exec(sqlite3* db, const char* sql) {
  if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) return Error(db, sql);
  return absl::OkStatus();
}

// One prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db), sql_(sql) {
    ok_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) == SQLITE_OK;
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  absl::Status status() const { return ok_ ? absl::OkStatus() : Error(db_, sql_); }
  Statement& Text(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& Blob(int i, const std::string& v) {
    sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& Int(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  // Runs a statement that returns no rows.
  absl::Status Run() {
    if (!ok_) return status();
    if (sqlite3_step(stmt_) != SQLITE_DONE) return Error(db_, sql_);
    return absl::OkStatus();
  }
  // Steps to the next row; false at the end (or on error, see status()).
  bool Next() {
    if (!ok_) return false;
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) ok_ = false;
    return false;
  }
  std::string ColumnText(int i) {
    const unsigned char* p = sqlite3_column_text(stmt_, i);
    return p == nullptr ? "" : std::string(reinterpret_cast<const char*>(p),
                                           static_cast<size_t>(sqlite3_column_bytes(stmt_, i)));
  }
  std::string ColumnBlob(int i) {
    const void* p = sqlite3_column_blob(stmt_, i);
    return p == nullptr ? "" : std::string(static_cast<const char*>(p),
                                           static_cast<size_t>(sqlite3_column_bytes(stmt_, i)));
  }
  int64_t ColumnInt(int i) { return sqlite3_column_int64(stmt_, i); }

 private:
  sqlite3* db_;
  const char* sql_;
  sqlite3_stmt* stmt_ = nullptr;
  bool ok_ = false;
};

absl::Status PutJobRow(sqlite3* db, const v1::Job& job) {
  return Statement(db, "INSERT OR REPLACE INTO jobs(id, record) VALUES(?, ?)")
      .Text(1, job.id())
      .Blob(2, job.SerializeAsString())
      .Run();
}

absl::Status PutEventRow(sqlite3* db, const std::string& job_id, const v1::JobEvent& event) {
  return Statement(db,
                   "INSERT OR REPLACE INTO events(job_id, sequence, is_step, event) "
                   "VALUES(?, ?, ?, ?)")
      .Text(1, job_id)
      .Int(2, event.sequence())
      // Trimmed as the event log keeps them (event_log.h's IsStepRecord).
      .Int(3, event.has_step() || event.has_numerics() ? 1 : 0)
      .Blob(4, event.SerializeAsString())
      .Run();
}

// Runs `body` inside one transaction, rolled back if it fails.
template <typename Body>
absl::Status Transaction(sqlite3* db, Body body) {
  RETURN_IF_ERROR(Exec(db, "BEGIN IMMEDIATE"));
  absl::Status s = body();
  if (!s.ok()) {
    Exec(db, "ROLLBACK").IgnoreError();
    return s;
  }
  return Exec(db, "COMMIT");
}

}  // namespace

JobStore::JobStore(std::unique_ptr<Db> db) : db_(std::move(db)) {}
JobStore::~JobStore() = default;

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  auto db = std::make_unique<Db>();
  if (sqlite3_open_v2(path.c_str(), &db->handle,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    return Error(db->handle, absl::StrCat("cannot open ", path));
  }
  sqlite3_busy_timeout(db->handle, 5000);
  for (const char* sql : {
           "PRAGMA journal_mode=WAL",
           "PRAGMA synchronous=NORMAL",
           "CREATE TABLE IF NOT EXISTS jobs(id TEXT PRIMARY KEY, record BLOB NOT NULL)",
           "CREATE TABLE IF NOT EXISTS events(job_id TEXT NOT NULL, sequence INTEGER NOT NULL, "
           "is_step INTEGER NOT NULL, event BLOB NOT NULL, PRIMARY KEY(job_id, sequence)) "
           "WITHOUT ROWID",
           "CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL)",
       }) {
    if (absl::Status s = Exec(db->handle, sql); !s.ok()) {
      return absl::Status(s.code() == absl::StatusCode::kInternal ? absl::StatusCode::kDataLoss
                                                                  : s.code(),
                          absl::StrCat(path, ": ", s.message()));
    }
  }
  return std::unique_ptr<JobStore>(new JobStore(std::move(db)));
}

absl::Status JobStore::PutJob(const v1::Job& job) { return PutJobRow(db_->handle, job); }

absl::Status JobStore::PutJobWithEvent(const v1::Job& job, const v1::JobEvent& event) {
  return Transaction(db_->handle, [&] {
    RETURN_IF_ERROR(PutJobRow(db_->handle, job));
    return PutEventRow(db_->handle, job.id(), event);
  });
}

absl::Status JobStore::AppendEvent(const std::string& job_id, const v1::JobEvent& event) {
  return PutEventRow(db_->handle, job_id, event);
}

absl::Status JobStore::DeleteJob(const std::string& job_id) {
  return Transaction(db_->handle, [&] {
    RETURN_IF_ERROR(Statement(db_->handle, "DELETE FROM events WHERE job_id = ?")
                        .Text(1, job_id)
                        .Run());
    return Statement(db_->handle, "DELETE FROM jobs WHERE id = ?").Text(1, job_id).Run();
  });
}

absl::Status JobStore::TrimStepEvents(const std::string& job_id, int64_t keep) {
  return Statement(db_->handle,
                   "DELETE FROM events WHERE job_id = ?1 AND is_step = 1 AND sequence NOT IN "
                   "(SELECT sequence FROM events WHERE job_id = ?1 AND is_step = 1 "
                   "ORDER BY sequence DESC LIMIT ?2)")
      .Text(1, job_id)
      .Int(2, keep)
      .Run();
}

absl::Status JobStore::SetCounter(const std::string& name, int64_t value) {
  return Statement(db_->handle, "INSERT OR REPLACE INTO counters(name, value) VALUES(?, ?)")
      .Text(1, name)
      .Int(2, value)
      .Run();
}

absl::StatusOr<int64_t> JobStore::Counter(const std::string& name, int64_t fallback) {
  Statement q(db_->handle, "SELECT value FROM counters WHERE name = ?");
  q.Text(1, name);
  if (q.Next()) return q.ColumnInt(0);
  RETURN_IF_ERROR(q.status());
  return fallback;
}

absl::StatusOr<std::vector<JobStore::StoredJob>> JobStore::LoadAll(
    std::vector<std::string>* skipped) {
  std::map<std::string, StoredJob> jobs;
  Statement records(db_->handle, "SELECT id, record FROM jobs");
  while (records.Next()) {
    StoredJob stored;
    const std::string id = records.ColumnText(0);
    if (!stored.job.ParseFromString(records.ColumnBlob(1)) || stored.job.id() != id) {
      if (skipped != nullptr) skipped->push_back(absl::StrCat("job record ", id));
      continue;
    }
    jobs[id] = std::move(stored);
  }
  RETURN_IF_ERROR(records.status());
  Statement events(db_->handle,
                   "SELECT job_id, sequence, event FROM events ORDER BY job_id, sequence");
  while (events.Next()) {
    auto it = jobs.find(events.ColumnText(0));
    if (it == jobs.end()) continue;  // a deleted job's leftovers
    v1::JobEvent event;
    if (!event.ParseFromString(events.ColumnBlob(2)) || event.sequence() != events.ColumnInt(1)) {
      if (skipped != nullptr) {
        skipped->push_back(absl::StrCat("event ", events.ColumnInt(1), " of ", it->first));
      }
      continue;
    }
    it->second.events.push_back(std::move(event));
  }
  RETURN_IF_ERROR(events.status());
  std::vector<StoredJob> out;
  for (auto& [id, stored] : jobs) out.push_back(std::move(stored));
  return out;
}

}  // namespace tessera
