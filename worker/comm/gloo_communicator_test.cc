// Gloo collectives across real, separate processes: each rank is a fork()ed
// child with its own file-backed rendezvous store. Checked against their
// definitions with fresh random inputs and poisoned outputs:
//   all-gather     = concatenation in rank order (raw bytes, exact);
//   reduce-scatter = elementwise sum over ranks, then this rank's slice
//                    (fp32 exact on integer values; bf16 within one bf16 ulp
//                    of the fp32 sum, since Gloo may add in any order);
//   all-reduce     = elementwise sum / max (exact on integer values);
// for world sizes 1, 2 and 3. Failure paths: a peer that never joins or dies
// between collectives gives ABORTED within the timeout, Abort() fails later
// calls at once and bounds a call already in flight, bad arguments give
// INVALID_ARGUMENT.
#include "worker/comm/gloo_communicator.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/comm/file_rendezvous_store_for_test.h"
#include "worker/engine/cpu/bf16.h"

namespace tessera {
namespace {

// A fresh rendezvous directory per group, so no test sees another's keys.
std::string FreshDir() {
  static int counter = 0;
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/rdzv-", getpid(), "-", counter++);
  mkdir(dir.c_str(), 0755);
  return dir;
}

// Runs child(rank, dir) in `world` forked processes and returns their exit
// codes (0 = success). gtest assertions do not cross fork(), so children
// report through the code. A child still running after `limit` is killed and
// reported as 99, so a hang fails the test instead of stalling it.
std::vector<int> ForkRanks(int world, absl::Duration limit,
                           const std::function<int(int, const std::string&)>& child) {
  const std::string dir = FreshDir();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    pid_t pid = fork();
    if (pid == 0) _exit(child(rank, dir));
    pids.push_back(pid);
  }
  std::vector<int> codes(world, -1);
  const absl::Time deadline = absl::Now() + limit;
  int running = world;
  while (running > 0) {
    for (int r = 0; r < world; ++r) {
      if (codes[r] != -1) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
        --running;
      } else if (absl::Now() > deadline) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &status, 0);
        codes[r] = 99;
        --running;
      }
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return codes;
}

// The usual case: every rank joins the group, then runs body. With
// wait_for_all, a rank that is done keeps its process (and so its sockets)
// alive until every rank is done: exiting while a peer still finishes the
// last collective can break that peer.
std::vector<int> RunRanks(int world, absl::Duration timeout,
                          const std::function<int(int, Communicator&)>& body,
                          bool wait_for_all = true) {
  return ForkRanks(world, timeout + absl::Seconds(20), [&](int rank, const std::string& dir) {
    FileRendezvousStore store(dir);
    auto comm = CreateGlooCommunicator(&store, rank, world, "127.0.0.1", timeout);
    if (!comm.ok()) return 90;
    const int code = body(rank, **comm);
    if (wait_for_all) {
      std::vector<std::string> done;
      for (int r = 0; r < world; ++r) done.push_back(absl::StrCat("test-done/", r));
      if (!store.Set(done[rank], "1").ok()) return 91;
      store.Get(done, absl::Seconds(10)).IgnoreError();
    }
    return code;
  });
}

// Rank r's inputs, reproducible by every rank from the shared seed.
std::mt19937 RankRng(uint32_t seed, int rank, int which) {
  std::seed_seq seq{seed, static_cast<uint32_t>(rank), static_cast<uint32_t>(which)};
  return std::mt19937(seq);
}
std::vector<uint8_t> RandomBytes(uint32_t seed, int rank, size_t n) {
  std::mt19937 rng = RankRng(seed, rank, 0);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}
// Integers in [-1000, 1000] as floats: sums over 3 ranks are exact in fp32.
std::vector<float> RandomIntFloats(uint32_t seed, int rank, int which, size_t n) {
  std::mt19937 rng = RankRng(seed, rank, which);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 2001) - 1000);
  return v;
}
std::vector<uint16_t> RandomBf16(uint32_t seed, int rank, size_t n) {
  std::mt19937 rng = RankRng(seed, rank, 9);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = cpu::FloatToBf16(dist(rng));
  return v;
}

class GlooCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectivesTest, MatchTheirDefinitions) {
  const int world = GetParam();
  const uint32_t seed = std::random_device()();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  constexpr size_t kBytes = 4099;  // odd on purpose
  constexpr int64_t kN = 1031;     // reduce-scatter elements per rank
  std::vector<int> codes = RunRanks(world, absl::Seconds(20), [&](int rank, Communicator& c) {
    if (c.rank() != rank || c.world_size() != world) return 1;

    std::vector<uint8_t> send = RandomBytes(seed, rank, kBytes);
    std::vector<uint8_t> gathered(kBytes * world, 0xEE);
    if (!c.AllGather(send.data(), gathered.data(), kBytes, nullptr).ok()) return 2;
    for (int r = 0; r < world; ++r) {
      std::vector<uint8_t> want = RandomBytes(seed, r, kBytes);
      if (!std::equal(want.begin(), want.end(), gathered.begin() + r * kBytes)) return 3;
    }

    std::vector<float> full = RandomIntFloats(seed, rank, 1, kN * world);
    std::vector<float> slice(kN, NAN);
    if (!c.ReduceScatter(MakeTensor(full.data(), DType::kFloat32, Shape{kN * world}),
                         MakeTensor(slice.data(), DType::kFloat32, Shape{kN}), nullptr)
             .ok()) {
      return 4;
    }
    std::vector<float> sum(kN * world, 0.0f);
    for (int r = 0; r < world; ++r) {
      std::vector<float> v = RandomIntFloats(seed, r, 1, kN * world);
      for (int64_t i = 0; i < kN * world; ++i) sum[i] += v[i];
    }
    for (int64_t i = 0; i < kN; ++i) {
      if (slice[i] != sum[rank * kN + i]) return 5;
    }
    // The send buffer is input only.
    if (full != RandomIntFloats(seed, rank, 1, kN * world)) return 6;

    std::vector<uint16_t> full16 = RandomBf16(seed, rank, kN * world);
    std::vector<uint16_t> slice16(kN, 0x7FC1);  // a NaN pattern
    if (!c.ReduceScatter(MakeTensor(full16.data(), DType::kBFloat16, Shape{kN * world}),
                         MakeTensor(slice16.data(), DType::kBFloat16, Shape{kN}), nullptr)
             .ok()) {
      return 7;
    }
    std::vector<float> sum16(kN, 0.0f);
    for (int r = 0; r < world; ++r) {
      std::vector<uint16_t> v = RandomBf16(seed, r, kN * world);
      for (int64_t i = 0; i < kN; ++i) sum16[i] += cpu::Bf16ToFloat(v[rank * kN + i]);
    }
    for (int64_t i = 0; i < kN; ++i) {
      const float got = cpu::Bf16ToFloat(slice16[i]);
      const float want = sum16[i];
      // One bf16 ulp (2^-7 relative) plus a small absolute term for
      // cancellation near zero.
      if (!(std::fabs(got - want) <= std::fabs(want) * (1.0f / 128) + 1e-3f)) return 8;
    }

    std::vector<float> a = RandomIntFloats(seed, rank, 2, 333);
    std::vector<float> m = RandomIntFloats(seed, rank, 3, 333);
    if (!c.AllReduce(MakeTensor(a.data(), DType::kFloat32, Shape{333}), ReduceOp::kSum, nullptr)
             .ok()) {
      return 9;
    }
    if (!c.AllReduce(MakeTensor(m.data(), DType::kFloat32, Shape{333}), ReduceOp::kMax, nullptr)
             .ok()) {
      return 10;
    }
    for (int i = 0; i < 333; ++i) {
      float want_sum = 0.0f, want_max = -INFINITY;
      for (int r = 0; r < world; ++r) {
        want_sum += RandomIntFloats(seed, r, 2, 333)[i];
        want_max = std::max(want_max, RandomIntFloats(seed, r, 3, 333)[i]);
      }
      if (a[i] != want_sum || m[i] != want_max) return 11;
    }

    // After Abort every collective fails at once with ABORTED.
    c.Abort();
    const absl::Time start = absl::Now();
    if (c.AllGather(send.data(), gathered.data(), kBytes, nullptr).code() !=
        absl::StatusCode::kAborted) {
      return 12;
    }
    if (c.AllReduce(MakeTensor(a.data(), DType::kFloat32, Shape{333}), ReduceOp::kSum, nullptr)
            .code() != absl::StatusCode::kAborted) {
      return 13;
    }
    if (absl::Now() - start > absl::Milliseconds(100)) return 14;
    return 0;
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooCollectivesTest, ::testing::Values(1, 2, 3));

TEST(GlooCommunicator, SingleRankNeedsNoStoreAndCopies) {
  auto comm = CreateGlooCommunicator(nullptr, 0, 1, "127.0.0.1", absl::Seconds(1));
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<uint8_t> send = RandomBytes(std::random_device()(), 0, 77), recv(77, 0xEE);
  ASSERT_TRUE((*comm)->AllGather(send.data(), recv.data(), 77, nullptr).ok());
  EXPECT_EQ(recv, send);
  std::vector<float> full = RandomIntFloats(std::random_device()(), 0, 1, 9), out(9, NAN);
  ASSERT_TRUE((*comm)
                  ->ReduceScatter(MakeTensor(full.data(), DType::kFloat32, Shape{9}),
                                  MakeTensor(out.data(), DType::kFloat32, Shape{9}), nullptr)
                  .ok());
  EXPECT_EQ(out, full);
}

TEST(GlooCommunicator, BadArgumentsAreInvalidArgument) {
  EXPECT_EQ(CreateGlooCommunicator(nullptr, 2, 2, "127.0.0.1", absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateGlooCommunicator(nullptr, 0, 0, "127.0.0.1", absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateGlooCommunicator(nullptr, 0, 2, "127.0.0.1", absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateGlooCommunicator(nullptr, 0, 1, "127.0.0.1", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto comm = CreateGlooCommunicator(nullptr, 0, 1, "", absl::Seconds(1));
  ASSERT_TRUE(comm.ok());
  std::vector<float> f(8, 1.0f), g(3, NAN);
  absl::Status s = (*comm)->ReduceScatter(MakeTensor(f.data(), DType::kFloat32, Shape{8}),
                                          MakeTensor(g.data(), DType::kFloat32, Shape{3}), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  std::vector<int32_t> ints(4, 1);
  EXPECT_EQ((*comm)
                ->AllReduce(MakeTensor(ints.data(), DType::kInt32, Shape{4}), ReduceOp::kSum,
                            nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GlooCommunicator, PeerThatNeverJoinsGivesAbortedWithinTheTimeout) {
  const absl::Duration timeout = absl::Seconds(2);
  std::vector<int> codes = ForkRanks(2, absl::Seconds(20), [&](int rank, const std::string& dir) {
    if (rank == 1) return 0;  // dies without taking part
    FileRendezvousStore store(dir);
    const absl::Time start = absl::Now();
    auto comm = CreateGlooCommunicator(&store, rank, 2, "127.0.0.1", timeout);
    if (comm.status().code() != absl::StatusCode::kAborted) return 30;
    if (absl::Now() - start > timeout + absl::Seconds(3)) return 31;
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

TEST(GlooCommunicator, PeerThatDiesBetweenCollectivesGivesAborted) {
  const absl::Duration timeout = absl::Seconds(2);
  std::vector<int> codes = RunRanks(3, timeout, [&](int rank, Communicator& c) {
    std::vector<float> v = RandomIntFloats(7, rank, 0, 64);
    TensorDesc t = MakeTensor(v.data(), DType::kFloat32, Shape{64});
    if (!c.AllReduce(t, ReduceOp::kSum, nullptr).ok()) return 20;  // everyone alive
    if (!c.FirstFailure().ok()) return 24;
    if (rank == 2) _exit(0);  // dies without joining the next collective
    const absl::Time start = absl::Now();
    absl::Status s = c.AllReduce(t, ReduceOp::kSum, nullptr);
    if (s.code() != absl::StatusCode::kAborted) return 21;
    if (c.FirstFailure() != s) return 25;  // the failure is remembered as it was
    if (absl::Now() - start > timeout + absl::Seconds(3)) return 22;
    // The failed group stays failed, without waiting again.
    if (c.AllReduce(t, ReduceOp::kSum, nullptr).code() != absl::StatusCode::kAborted) return 23;
    return 0;
  }, /*wait_for_all=*/false);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(GlooCommunicator, AbortDuringABlockedCollectiveEndsItByTheTimeout) {
  const absl::Duration timeout = absl::Seconds(1);
  std::vector<int> codes = RunRanks(2, timeout, [&](int rank, Communicator& c) {
    if (rank == 1) {
      // Alive but never calls the collective; leaves after rank 0 gave up.
      absl::SleepFor(timeout + absl::Milliseconds(500));
      return 0;
    }
    std::vector<float> v(32, 1.0f);
    std::thread aborter([&c] {
      absl::SleepFor(absl::Milliseconds(200));
      c.Abort();
    });
    const absl::Time start = absl::Now();
    absl::Status s = c.AllReduce(MakeTensor(v.data(), DType::kFloat32, Shape{32}),
                                 ReduceOp::kSum, nullptr);
    const absl::Duration took = absl::Now() - start;
    aborter.join();
    if (s.code() != absl::StatusCode::kAborted) return 40;
    if (took > timeout + absl::Seconds(1)) return 41;
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

}  // namespace
}  // namespace tessera
