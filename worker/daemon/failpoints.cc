// Parsing and firing of the worker's failpoints (see failpoints.h). The
// parser is strict because a typo in a chaos experiment that silently arms
// nothing would make a recovery test pass for the wrong reason.
#include "worker/daemon/failpoints.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace tessera {
namespace {

struct ActionName {
  FailpointAction action;
  const char* name;
};

constexpr ActionName kActionNames[] = {
    {FailpointAction::kExit, "exit"},
    {FailpointAction::kHang, "hang"},
    {FailpointAction::kFailCollective, "fail_collective"},
    {FailpointAction::kCorruptCheckpoint, "corrupt_checkpoint"},
    {FailpointAction::kSlow, "slow"},
};

constexpr int kMaxSlowMs = 10 * 60 * 1000;  // ten minutes

const char* NameOf(FailpointAction action) {
  for (const ActionName& a : kActionNames) {
    if (a.action == action) return a.name;
  }
  return "unknown";
}

std::string KnownNames() {
  std::vector<std::string> names;
  for (const ActionName& a : kActionNames) names.push_back(a.name);
  return absl::StrJoin(names, ", ");
}

absl::Status EntryError(int index, absl::string_view entry, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("failpoints: entry ", index, " \"", entry, "\": ", why));
}

absl::StatusOr<Failpoint> ParseEntry(int index, absl::string_view entry) {
  const size_t at = entry.find('@');
  if (at == absl::string_view::npos) {
    return EntryError(index, entry, "expected NAME@step=N[,rank=R][,ms=M]");
  }
  const absl::string_view name = entry.substr(0, at);
  Failpoint failpoint;
  bool known = false;
  for (const ActionName& a : kActionNames) {
    if (name == a.name) {
      failpoint.action = a.action;
      known = true;
    }
  }
  if (!known) {
    return EntryError(index, entry,
                      absl::StrCat("unknown failpoint \"", name, "\" (known: ", KnownNames(), ")"));
  }
  std::map<std::string, int> values;
  for (absl::string_view pair : absl::StrSplit(entry.substr(at + 1), ',')) {
    const size_t eq = pair.find('=');
    if (eq == absl::string_view::npos) {
      return EntryError(index, entry, absl::StrCat("\"", pair, "\" is not key=value"));
    }
    const std::string key(pair.substr(0, eq));
    const absl::string_view text = pair.substr(eq + 1);
    if (key != "rank" && key != "step" && key != "ms" && key != "steps") {
      return EntryError(index, entry,
                        absl::StrCat("unknown key \"", key, "\" (known: rank, step, ms, steps)"));
    }
    if (values.count(key) > 0) {
      return EntryError(index, entry, absl::StrCat("key \"", key, "\" given twice"));
    }
    int value = 0;
    // SimpleAtoi takes a sign and surrounding spaces; a spec is digits only.
    if (text.empty() || text.size() > 9 ||
        text.find_first_not_of("0123456789") != absl::string_view::npos ||
        !absl::SimpleAtoi(text, &value)) {
      return EntryError(index, entry,
                        absl::StrCat(key, ": \"", text, "\" is not a number in [0, 999999999]"));
    }
    values[key] = value;
  }
  if (values.count("step") == 0) return EntryError(index, entry, "step: must be given");
  failpoint.step = values["step"];
  if (values.count("rank") > 0) failpoint.rank = values["rank"];
  const bool slow = failpoint.action == FailpointAction::kSlow;
  if (slow && values.count("ms") == 0) return EntryError(index, entry, "ms: slow needs it");
  if (!slow && values.count("ms") > 0) {
    return EntryError(index, entry, absl::StrCat("ms: only slow takes it, not ", name));
  }
  if (!slow && values.count("steps") > 0) {
    return EntryError(index, entry, absl::StrCat("steps: only slow takes it, not ", name));
  }
  if (values.count("steps") > 0) {
    failpoint.steps = values["steps"];
    if (failpoint.steps < 1) return EntryError(index, entry, "steps: must be >= 1 (got 0)");
  }
  if (slow) {
    failpoint.ms = values["ms"];
    if (failpoint.ms < 1 || failpoint.ms > kMaxSlowMs) {
      return EntryError(index, entry,
                        absl::StrCat("ms: must be in [1, ", kMaxSlowMs, "] (got ", failpoint.ms,
                                     ")"));
    }
  }
  return failpoint;
}

}  // namespace

std::string Failpoint::ToString() const {
  std::string out = absl::StrCat(NameOf(action), "@");
  if (rank >= 0) absl::StrAppend(&out, "rank=", rank, ",");
  absl::StrAppend(&out, "step=", step);
  if (action == FailpointAction::kSlow) absl::StrAppend(&out, ",ms=", ms);
  if (steps > 1) absl::StrAppend(&out, ",steps=", steps);
  return out;
}

absl::StatusOr<std::vector<Failpoint>> Failpoints::Parse(absl::string_view spec) {
  std::vector<Failpoint> armed;
  spec = absl::StripAsciiWhitespace(spec);
  if (spec.empty()) return armed;
  int index = 0;
  for (absl::string_view entry : absl::StrSplit(spec, ';')) {
    ++index;
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) return EntryError(index, entry, "empty entry (stray ';')");
    absl::StatusOr<Failpoint> failpoint = ParseEntry(index, entry);
    if (!failpoint.ok()) return failpoint.status();
    armed.push_back(*failpoint);
  }
  return armed;
}

std::string Failpoints::ToString() const {
  std::vector<std::string> entries;
  for (const Failpoint& f : armed_) entries.push_back(f.ToString());
  return absl::StrJoin(entries, ";");
}

std::optional<Failpoint> Failpoints::Take(int rank, int step, bool checkpoint) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < armed_.size(); ++i) {
    const Failpoint& f = armed_[i];
    // Both are at most 999999999, so the sum fits an int.
    const bool in_range = step >= f.step && step < f.step + f.steps;
    if (!in_range || step <= fired_through_[i] || (f.rank >= 0 && f.rank != rank)) continue;
    if ((f.action == FailpointAction::kCorruptCheckpoint) != checkpoint) continue;
    fired_through_[i] = step;
    return f;
  }
  return std::nullopt;
}

std::optional<Failpoint> Failpoints::TakeBeforeStep(int rank, int step) {
  return Take(rank, step, /*checkpoint=*/false);
}

std::optional<Failpoint> Failpoints::TakeAfterCheckpoint(int rank, int step) {
  return Take(rank, step, /*checkpoint=*/true);
}

void KillThisProcessForFailpoint(const Failpoint& failpoint) {
  std::fprintf(stderr, "tessera-worker: failpoint %s fired: killing this process (time_unix_ms=%lld)\n",
               failpoint.ToString().c_str(), static_cast<long long>(absl::ToUnixMillis(absl::Now())));
  std::fflush(stderr);
  std::fflush(stdout);
  kill(getpid(), SIGKILL);
  // SIGKILL cannot be caught or blocked; this is never reached.
  _exit(137);
}

absl::Status FlipOneByte(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::InternalError(absl::StrCat(path, ": open: ", std::strerror(err)));
  }
  struct stat st {};
  absl::Status status;
  unsigned char byte = 0;
  if (fstat(fd, &st) != 0) {
    status = absl::InternalError(absl::StrCat(path, ": fstat: ", std::strerror(errno)));
  } else if (st.st_size == 0) {
    status = absl::FailedPreconditionError(absl::StrCat(path, ": empty, no byte to flip"));
  } else {
    const off_t middle = st.st_size / 2;
    if (pread(fd, &byte, 1, middle) != 1) {
      status = absl::InternalError(absl::StrCat(path, ": read: ", std::strerror(errno)));
    } else {
      byte ^= 0xFF;
      if (pwrite(fd, &byte, 1, middle) != 1 || fsync(fd) != 0) {
        status = absl::InternalError(absl::StrCat(path, ": write: ", std::strerror(errno)));
      }
    }
  }
  close(fd);
  return status;
}

}  // namespace tessera
