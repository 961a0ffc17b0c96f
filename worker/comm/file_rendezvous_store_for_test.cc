// Directory-backed RendezvousStore for multi-process tests (see the header).
#include "worker/comm/file_rendezvous_store_for_test.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tessera {

std::string FileRendezvousStore::Path(const std::string& key) const {
  std::string safe;
  for (char c : key) safe += (isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return absl::StrCat(dir_, "/", safe, "_", std::hash<std::string>()(key));
}

absl::Status FileRendezvousStore::Set(const std::string& key, const std::string& value) {
  std::string path = Path(key);
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << value;
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> FileRendezvousStore::Get(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> values;
  for (const std::string& key : keys) {
    while (access(Path(key).c_str(), R_OK) != 0) {
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(absl::StrCat("key never set: ", key));
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    std::ifstream in(Path(key), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    values.push_back(ss.str());
  }
  return values;
}

absl::StatusOr<int64_t> FileRendezvousStore::Add(const std::string& key, int64_t increment) {
  int lock = open((dir_ + "/.lock").c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0 || flock(lock, LOCK_EX) != 0) {
    if (lock >= 0) close(lock);
    return absl::InternalError(absl::StrCat("cannot lock ", dir_, "/.lock"));
  }
  int64_t value = 0;
  std::ifstream in(Path(key));
  std::string text;
  if (in >> text) absl::SimpleAtoi(text, &value);
  value += increment;
  absl::Status s = Set(key, absl::StrCat(value));
  flock(lock, LOCK_UN);
  close(lock);
  if (!s.ok()) return s;
  return value;
}

}  // namespace tessera
