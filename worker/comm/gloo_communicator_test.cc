// Gloo collectives across real, separate processes (fork): all-gather is
// concatenation, reduce-scatter is sum-then-slice (fp32 and bf16),
// all-reduce sum/max, for world sizes 1, 2 and 3; a dead peer gives ABORTED
// within the timeout, and Abort() fails later calls.
#include "worker/comm/gloo_communicator.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/comm/file_rendezvous_store_for_test.h"
#include "worker/engine/cpu/bf16.h"

namespace tessera {
namespace {

std::string FreshDir() {
  static int counter = 0;
  std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/rdzv-", getpid(), "-", counter++);
  mkdir(dir.c_str(), 0755);
  return dir;
}

// Runs body(rank, comm) in `world` forked processes; returns the exit codes.
// A body returns 0 on success; gtest assertions do not cross fork, so bodies
// check with plain comparisons.
std::vector<int> RunRanks(int world, absl::Duration timeout,
                          const std::function<int(int, Communicator&)>& body) {
  std::string dir = FreshDir();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      FileRendezvousStore store(dir);
      auto comm = CreateGlooCommunicator(&store, rank, world, "127.0.0.1", timeout);
      if (!comm.ok()) _exit(90);
      int code = body(rank, **comm);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status));
  }
  return codes;
}

class GlooTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooTest, CollectivesMatchTheirDefinitions) {
  const int world = GetParam();
  std::vector<int> codes = RunRanks(world, absl::Seconds(20), [world](int rank, Communicator& c) {
    if (c.rank() != rank || c.world_size() != world) return 1;
    // All-gather: concatenation in rank order.
    std::vector<uint8_t> send(5), recv(5 * world, 0xEE);
    for (int i = 0; i < 5; ++i) send[i] = static_cast<uint8_t>(rank * 10 + i);
    if (!c.AllGather(send.data(), recv.data(), 5, nullptr).ok()) return 2;
    for (int r = 0; r < world; ++r) {
      for (int i = 0; i < 5; ++i) if (recv[r * 5 + i] != r * 10 + i) return 3;
    }
    // Reduce-scatter fp32: sum over ranks, then this rank's slice.
    const int n = 4;
    std::vector<float> full(n * world), slice(n, NAN);
    for (int i = 0; i < n * world; ++i) full[i] = static_cast<float>((rank + 1) * (i + 1));
    if (!c.ReduceScatter(MakeTensor(full.data(), DType::kFloat32, Shape{n * world}),
                         MakeTensor(slice.data(), DType::kFloat32, Shape{n}), nullptr).ok()) {
      return 4;
    }
    const float ranks_sum = world * (world + 1) / 2.0f;
    for (int i = 0; i < n; ++i) if (slice[i] != ranks_sum * (rank * n + i + 1)) return 5;
    // Reduce-scatter bf16: the fp32 sum rounded once.
    std::vector<uint16_t> fb(n * world), sb(n, 0xFFFF);
    for (int i = 0; i < n * world; ++i) fb[i] = cpu::FloatToBf16(0.1f * (rank + 1) * (i + 1));
    if (!c.ReduceScatter(MakeTensor(fb.data(), DType::kBFloat16, Shape{n * world}),
                         MakeTensor(sb.data(), DType::kBFloat16, Shape{n}), nullptr).ok()) {
      return 6;
    }
    for (int i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < world; ++r) want += cpu::Bf16ToFloat(cpu::FloatToBf16(0.1f * (r + 1) * (rank * n + i + 1)));
      if (sb[i] != cpu::FloatToBf16(want)) return 7;
    }
    // All-reduce sum and max.
    std::vector<float> v = {static_cast<float>(rank), -static_cast<float>(rank), 1.0f};
    if (!c.AllReduce(MakeTensor(v.data(), DType::kFloat32, Shape{3}), ReduceOp::kSum, nullptr).ok()) return 8;
    if (v[0] != world * (world - 1) / 2.0f || v[2] != world) return 9;
    std::vector<float> mx = {static_cast<float>(rank), -static_cast<float>(rank)};
    if (!c.AllReduce(MakeTensor(mx.data(), DType::kFloat32, Shape{2}), ReduceOp::kMax, nullptr).ok()) return 10;
    if (mx[0] != world - 1 || mx[1] != 0) return 11;
    // After Abort every call fails with ABORTED.
    c.Abort();
    if (c.AllGather(send.data(), recv.data(), 5, nullptr).code() != absl::StatusCode::kAborted) return 12;
    return 0;
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooTest, ::testing::Values(1, 2, 3));

TEST(Gloo, DeadPeerGivesAbortedWithinTheTimeout) {
  std::vector<int> codes = RunRanks(2, absl::Seconds(2), [](int rank, Communicator& c) {
    std::vector<float> v(16, 1.0f);
    TensorDesc t = MakeTensor(v.data(), DType::kFloat32, Shape{16});
    if (!c.AllReduce(t, ReduceOp::kSum, nullptr).ok()) return 20;  // both alive
    if (rank == 1) _exit(0);  // rank 1 dies without joining the next collective
    absl::Time start = absl::Now();
    absl::Status s = c.AllReduce(t, ReduceOp::kSum, nullptr);
    if (s.code() != absl::StatusCode::kAborted) return 21;
    if (absl::Now() - start > absl::Seconds(15)) return 22;
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

}  // namespace
}  // namespace tessera
