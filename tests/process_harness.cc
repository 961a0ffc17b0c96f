// Child-process management for the integration tests (see process_harness.h).
#include "tests/process_harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tessera {
namespace testing {
std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ReadTrimmedFile(const std::string& path) {
  std::string s = ReadFile(path);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string BinaryPath(const std::string& workspace_relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr) {
    return absl::StrCat(srcdir, "/", workspace != nullptr ? workspace : "tessera", "/",
                        workspace_relative);
  }
  return workspace_relative;
}

std::string MakeTempDir(const std::string& prefix) {
  static std::atomic<int> counter{0};
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/", prefix, "-", getpid(), "-",
                                 counter.fetch_add(1));
  mkdir(dir.c_str(), 0755);
  return dir;
}

int PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::string& binary, const std::vector<std::string>& args, const std::string& log_path) {
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("binary not found: ", binary));
  }
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(binary.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, log_path));
}

ChildProcess::~ChildProcess() { Kill(); }

bool ChildProcess::Running() {
  if (reaped_) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  return true;
}

absl::StatusOr<std::string> ChildProcess::WaitForLine(const std::string& needle,
                                                      absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    std::string log = ReadFile(log_path_);
    size_t pos = log.find(needle);
    if (pos != std::string::npos) {
      size_t begin = log.rfind('\n', pos);
      begin = begin == std::string::npos ? 0 : begin + 1;
      size_t end = log.find('\n', pos);
      return log.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    }
    if (!Running()) {
      return absl::FailedPreconditionError(
          absl::StrCat("process exited (code ", exit_code_, ") before printing '", needle,
                       "'; log:\n", log));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("'", needle, "' not printed in time; log:\n", ReadFile(log_path_)));
}

int64_t ResidentBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6) * 1024;  // kB
  }
  return -1;
}

PeakResidentBytes::PeakResidentBytes(pid_t pid)
    : pid_(pid), peak_(ResidentBytes(pid)), sampler_([this] {
        while (!done_.load()) {
          const int64_t now = ResidentBytes(pid_);
          if (now > peak_.load()) peak_.store(now);
          absl::SleepFor(absl::Milliseconds(10));
        }
      }) {}

PeakResidentBytes::~PeakResidentBytes() { Stop(); }

int64_t PeakResidentBytes::Stop() {
  if (!done_.exchange(true)) sampler_.join();
  return peak_.load();
}

int ChildProcess::WaitExit(absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (Running()) {
    if (absl::Now() >= deadline) return -1;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return exit_code_;
}

int ChildProcess::Stop(absl::Duration grace) {
  if (!Running()) return exit_code_;
  kill(pid_, SIGTERM);
  int code = WaitExit(grace);
  if (code == -1) {
    Kill();
    return exit_code_;
  }
  return code;
}

void ChildProcess::Kill() {
  if (!Running()) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  reaped_ = true;
  exit_code_ = 128 + SIGKILL;
}

std::string ChildProcess::Log() const { return ReadFile(log_path_); }

CommandResult RunCommand(const std::string& binary, const std::vector<std::string>& args,
                         absl::Duration timeout) {
  CommandResult result;
  std::string log = absl::StrCat(MakeTempDir("cmd"), "/out.log");
  auto child = ChildProcess::Start(binary, args, log);
  if (!child.ok()) {
    result.output = std::string(child.status().message());
    return result;
  }
  result.exit_code = (*child)->WaitExit(timeout);
  if (result.exit_code == -1) (*child)->Kill();
  result.output = (*child)->Log();
  return result;
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    int num_workers, const std::vector<std::string>& extra_coordinator_flags) {
  auto cluster = std::unique_ptr<LocalCluster>(new LocalCluster());
  cluster->dir_ = MakeTempDir("cluster");
  cluster->address_ = absl::StrCat("127.0.0.1:", PickFreePort());
  std::vector<std::string> flags = {absl::StrCat("--listen=", cluster->address_),
                                    absl::StrCat("--state_dir=", cluster->dir_, "/state")};
  flags.insert(flags.end(), extra_coordinator_flags.begin(), extra_coordinator_flags.end());
  auto coordinator = ChildProcess::Start(BinaryPath("server/tessera-coordinator"), flags,
                                         cluster->dir_ + "/coordinator.log");
  if (!coordinator.ok()) return coordinator.status();
  cluster->coordinator_ = std::move(*coordinator);
  auto ready = cluster->coordinator_->WaitForLine("listening on", absl::Seconds(30));
  if (!ready.ok()) return ready.status();
  for (int i = 0; i < num_workers; ++i) {
    auto worker = ChildProcess::Start(
        BinaryPath("worker/tessera-worker"),
        {absl::StrCat("--coordinator=", cluster->address_), "--device=cpu"},
        absl::StrCat(cluster->dir_, "/worker-", i, ".log"));
    if (!worker.ok()) return worker.status();
    cluster->workers_.push_back(std::move(*worker));
  }
  for (auto& worker : cluster->workers_) {
    auto serving = worker->WaitForLine("serving on", absl::Seconds(30));
    if (!serving.ok()) return serving.status();
  }
  return cluster;
}

absl::StatusOr<int> LocalCluster::WorkerProcess(const std::string& worker_id) {
  const std::string line = absl::StrCat("tessera-worker ", worker_id, " serving on");
  for (int i = 0; i < num_workers(); ++i) {
    if (workers_[i]->Log().find(line) != std::string::npos) return i;
  }
  return absl::NotFoundError(absl::StrCat("no worker process registered as ", worker_id));
}

absl::StatusOr<int> LocalCluster::AddWorker() {
  const int index = static_cast<int>(workers_.size());
  auto worker = ChildProcess::Start(
      BinaryPath("worker/tessera-worker"),
      {absl::StrCat("--coordinator=", address_), "--device=cpu"},
      absl::StrCat(dir_, "/worker-", index, ".log"));
  if (!worker.ok()) return worker.status();
  workers_.push_back(std::move(*worker));
  auto serving = workers_.back()->WaitForLine("serving on", absl::Seconds(30));
  if (!serving.ok()) return serving.status();
  return index;
}

std::string LocalCluster::Logs() const {
  std::string out = absl::StrCat("--- coordinator ---\n", coordinator_->Log());
  for (size_t i = 0; i < workers_.size(); ++i) {
    absl::StrAppend(&out, "--- worker ", i, " ---\n", workers_[i]->Log());
  }
  return out;
}

}  // namespace testing
}  // namespace tessera
