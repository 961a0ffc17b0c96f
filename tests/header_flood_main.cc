// header_flood: sends an endless HTTP/2 header block (or one call with an
// oversized header) to a TLS server and prints what the server did, with
// the resident memory of --watch_pid sampled during and after the flood.
// Test-only: the by-hand counterpart of tests/header_flood_test.cc, for
// measuring a server (or a front proxy) at larger sizes than CI can afford.
//
//   header_flood --port=50051 --shape=endless --max_mib=256 --seconds=120 --watch_pid=PID
//   header_flood --port=50051 --call_header=authorization --call_header_kib=1024
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/http2_raw_client.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "server IPv4 address");
ABSL_FLAG(int, port, 0, "server port");
ABSL_FLAG(std::string, shape, "endless", "endless (one field that never ends) or many (fields)");
ABSL_FLAG(int, max_mib, 64, "stop the flood after this many MiB of header bytes");
ABSL_FLAG(int, seconds, 30, "stop the flood after this long");
ABSL_FLAG(bool, ack, false, "acknowledge the server's SETTINGS");
ABSL_FLAG(int, watch_pid, 0, "sample this process's VmRSS during the flood (0: none)");
ABSL_FLAG(std::string, call_header, "",
          "instead of a flood, send one ListWorkers call with this header made --call_header_kib "
          "KiB long");
ABSL_FLAG(int, call_header_kib, 1024, "size of --call_header");
ABSL_FLAG(std::string, token_file, "", "bearer token to send with the call (empty: none)");
ABSL_FLAG(int, frame_kib, 16, "header frame payload size");

namespace {

int64_t RssKib(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

std::string Trimmed(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  namespace t = tessera::testing;
  const std::string host = absl::GetFlag(FLAGS_host);
  const int port = absl::GetFlag(FLAGS_port);
  const int pid = absl::GetFlag(FLAGS_watch_pid);
  std::vector<t::HeaderField> fields =
      t::GrpcRequestFields(absl::StrCat(host, ":", port), "/tessera.v1.Coordinator/ListWorkers");
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    fields.push_back({"authorization", "Bearer " + Trimmed(absl::GetFlag(FLAGS_token_file))});
  }

  const int64_t before = pid > 0 ? RssKib(pid) : -1;
  std::atomic<bool> done{false};
  std::atomic<int64_t> peak{before};
  std::thread sampler([&] {
    while (pid > 0 && !done.load()) {
      const int64_t now = RssKib(pid);
      if (now > peak.load()) peak.store(now);
      absl::SleepFor(absl::Milliseconds(20));
    }
  });

  absl::StatusOr<t::Http2Outcome> outcome;
  if (const std::string name = absl::GetFlag(FLAGS_call_header); !name.empty()) {
    if (name == "authorization") {
      fields.erase(std::remove_if(fields.begin(), fields.end(),
                                  [&name](const t::HeaderField& f) { return f.first == name; }),
                   fields.end());
    }
    fields.push_back({name, std::string(absl::GetFlag(FLAGS_call_header_kib) * 1024, 'a')});
    outcome = t::SendUnaryCall(host, port, fields, "", absl::GetFlag(FLAGS_frame_kib) * 1024,
                               absl::GetFlag(FLAGS_ack), absl::Seconds(30));
  } else {
    t::FloodOptions options;
    options.shape = absl::GetFlag(FLAGS_shape) == "many" ? t::FloodShape::kManyFields
                                                         : t::FloodShape::kOneEndlessField;
    options.max_bytes = int64_t{absl::GetFlag(FLAGS_max_mib)} << 20;
    options.max_time = absl::Seconds(absl::GetFlag(FLAGS_seconds));
    options.frame_size = absl::GetFlag(FLAGS_frame_kib) * 1024;
    options.ack_settings = absl::GetFlag(FLAGS_ack);
    outcome = t::SendHeaderFlood(host, port, fields, options);
  }
  const int64_t at_end = pid > 0 ? RssKib(pid) : -1;
  absl::SleepFor(absl::Seconds(pid > 0 ? 3 : 0));
  done.store(true);
  sampler.join();
  if (!outcome.ok()) {
    std::fprintf(stderr, "header_flood: %s\n", outcome.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n", outcome->Describe().c_str());
  if (pid > 0) {
    std::printf("VmRSS of %d: before %lld KiB, peak %lld KiB, at the end %lld KiB, 3 s later "
                "%lld KiB\n",
                pid, static_cast<long long>(before), static_cast<long long>(peak.load()),
                static_cast<long long>(at_end), static_cast<long long>(RssKib(pid)));
  }
  return 0;
}
