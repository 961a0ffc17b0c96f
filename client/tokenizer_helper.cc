// Starting tessera-sentencepiece and collecting its output (see
// tokenizer_helper.h). posix_spawn with its output on one pipe (both
// streams, unless standard error passes through): the helper prints a line
// or two there, so one reader cannot deadlock.
#include "client/tokenizer_helper.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace tessera {
namespace {

// The directory of the running program, from /proc/self/exe.
std::string ProgramDir() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  std::string exe(path, n);
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

}  // namespace

absl::StatusOr<HelperResult> RunTokenizerHelper(const std::vector<std::string>& args,
                                                HelperStderr stderr_mode) {
  std::string program = kTokenizerHelperName;
  if (const std::string dir = ProgramDir(); !dir.empty()) {
    const std::string beside = absl::StrCat(dir, "/", kTokenizerHelperName);
    if (access(beside.c_str(), X_OK) == 0) program = beside;
  }
  std::vector<std::string> argv_strings = {program};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);

  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  if (stderr_mode == HelperStderr::kCollect) {
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  }
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  pid_t pid = 0;
  // posix_spawnp: a bare name is looked up on PATH.
  const int spawned = posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (spawned != 0) {
    close(fds[0]);
    return absl::NotFoundError(absl::StrCat(
        "cannot run ", kTokenizerHelperName, " (looked next to this program and on PATH): ",
        std::strerror(spawned)));
  }
  HelperResult result;
  char buffer[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n > 0) {
      result.output.append(buffer, n);
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace tessera
