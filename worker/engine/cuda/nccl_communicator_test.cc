// NcclCommunicator across two real processes, one GPU each (needs 2 GPUs,
// tag "gpu"; with fewer the tests skip). Each test forks one process per
// rank (device = rank) and bootstraps through a FileRendezvousStore in a
// fresh directory. Checked: all-gather is the rank-order concatenation,
// reduce-scatter (fp32 and bf16) is slice `rank` of the sum, all-reduce sum
// and max; and the watchdog: a peer that never joins, or never enters a
// collective, turns into ABORTED after the timeout instead of a hang.
// The grouped Start* forms are checked the same way. Three tests need one
// GPU only (a group of one): a collective returns while the device is still
// busy before it (it is queued, not waited for); a started collective holds
// up only the streams that wait for its ticket; and the watchdog thread
// fails a queued collective that outlives its timeout while the caller's
// thread is free.
//
// The parent process never touches CUDA (a forked child cannot use a CUDA
// context its parent created). gtest assertions do not cross fork, so rank
// bodies return an error string and the exit code carries the verdict.
#include "worker/engine/cuda/nccl_communicator.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/comm/file_rendezvous_store_for_test.h"
#include "worker/engine/cpu/bf16.h"

namespace tessera {
namespace {

constexpr int kWorld = 2;
constexpr int kSkipExitCode = 77;

// Runs body(rank, store dir) in `world` forked processes; returns their exit
// codes. A body returns "" on success or a description of what failed.
std::vector<int> RunRanks(const std::function<std::string(int, const std::string&)>& body,
                          int world = kWorld) {
  char dir_template[] = "/tmp/nccl_test_XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      int count = 0;
      if (cudaGetDeviceCount(&count) != cudaSuccess || count < world) _exit(kSkipExitCode);
      const std::string error = body(rank, dir);
      if (!error.empty()) std::fprintf(stderr, "rank %d: %s\n", rank, error.c_str());
      std::fflush(stderr);
      _exit(error.empty() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  return codes;
}

void ExpectAllPassed(const std::vector<int>& codes) {
  for (int code : codes) {
    if (code == kSkipExitCode) GTEST_SKIP() << "needs " << codes.size() << " GPUs";
  }
  for (size_t rank = 0; rank < codes.size(); ++rank) EXPECT_EQ(codes[rank], 0) << "rank " << rank;
}

// Device buffer helpers for the rank bodies.
template <typename T>
T* Upload(const std::vector<T>& host) {
  T* device = nullptr;
  cudaMalloc(&device, std::max<size_t>(1, host.size()) * sizeof(T));
  cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return device;
}
template <typename T>
std::vector<T> Download(const T* device, size_t n) {
  std::vector<T> host(n);
  cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

std::string CollectivesBody(int rank, const std::string& dir) {
  if (cudaSetDevice(rank) != cudaSuccess) return "cudaSetDevice failed";
  FileRendezvousStore store(dir);
  auto comm = CreateNcclCommunicator(&store, rank, kWorld, rank, absl::Seconds(60));
  if (!comm.ok()) return comm.status().ToString();
  if ((*comm)->rank() != rank || (*comm)->world_size() != kWorld) return "rank/world_size";

  // All-gather: rank-order concatenation of raw bytes (an odd count).
  const size_t bytes = 1001;
  std::vector<uint8_t> send(bytes);
  for (size_t i = 0; i < bytes; ++i) send[i] = static_cast<uint8_t>(i * 3 + rank * 101);
  uint8_t* d_send = Upload(send);
  uint8_t* d_recv = Upload(std::vector<uint8_t>(kWorld * bytes, 0xEE));
  absl::Status s = (*comm)->AllGather(d_send, d_recv, bytes, nullptr);
  if (!s.ok()) return s.ToString();
  std::vector<uint8_t> gathered = Download(d_recv, kWorld * bytes);
  for (int r = 0; r < kWorld; ++r) {
    for (size_t i = 0; i < bytes; ++i) {
      if (gathered[r * bytes + i] != static_cast<uint8_t>(i * 3 + r * 101)) {
        return absl::StrCat("all-gather byte ", r * bytes + i);
      }
    }
  }

  // Reduce-scatter, fp32 and bf16: small integers, so every sum is exact.
  const int64_t n = 777;
  auto value = [](int r, int64_t i) { return static_cast<float>((i % 13) - 6 + 2 * r); };
  std::vector<float> rs_send(kWorld * n);
  std::vector<uint16_t> rs_send16(kWorld * n);
  for (int64_t i = 0; i < kWorld * n; ++i) {
    rs_send[i] = value(rank, i);
    rs_send16[i] = cpu::FloatToBf16(value(rank, i));
  }
  float* d_rs = Upload(rs_send);
  float* d_rs_out = Upload(std::vector<float>(n, NAN));
  uint16_t* d_rs16 = Upload(rs_send16);
  uint16_t* d_rs16_out = Upload(std::vector<uint16_t>(n, 0xFFFF));
  s = (*comm)->ReduceScatter(MakeTensor(d_rs, DType::kFloat32, Shape{kWorld * n}),
                             MakeTensor(d_rs_out, DType::kFloat32, Shape{n}), nullptr);
  if (s.ok()) {
    s = (*comm)->ReduceScatter(MakeTensor(d_rs16, DType::kBFloat16, Shape{kWorld * n}),
                               MakeTensor(d_rs16_out, DType::kBFloat16, Shape{n}), nullptr);
  }
  if (!s.ok()) return s.ToString();
  std::vector<float> rs = Download(d_rs_out, n);
  std::vector<uint16_t> rs16 = Download(d_rs16_out, n);
  for (int64_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < kWorld; ++r) want += value(r, rank * n + i);
    if (rs[i] != want) return absl::StrCat("reduce-scatter fp32 element ", i);
    if (cpu::Bf16ToFloat(rs16[i]) != want) return absl::StrCat("reduce-scatter bf16 element ", i);
  }

  // Wrong sizes are INVALID_ARGUMENT, and leave the group usable.
  if ((*comm)->ReduceScatter(MakeTensor(d_rs, DType::kFloat32, Shape{n}),
                             MakeTensor(d_rs_out, DType::kFloat32, Shape{n}), nullptr)
          .code() != absl::StatusCode::kInvalidArgument) {
    return "reduce-scatter with send != world x recv was accepted";
  }

  // All-reduce, sum and max.
  std::vector<float> ar(n), ar_max(n);
  for (int64_t i = 0; i < n; ++i) {
    ar[i] = value(rank, i);
    ar_max[i] = (i + rank) % 2 == 0 ? static_cast<float>(i) : -static_cast<float>(i);
  }
  float* d_ar = Upload(ar);
  float* d_ar_max = Upload(ar_max);
  s = (*comm)->AllReduce(MakeTensor(d_ar, DType::kFloat32, Shape{n}), ReduceOp::kSum, nullptr);
  if (s.ok()) {
    s = (*comm)->AllReduce(MakeTensor(d_ar_max, DType::kFloat32, Shape{n}), ReduceOp::kMax,
                           nullptr);
  }
  if (!s.ok()) return s.ToString();
  ar = Download(d_ar, n);
  ar_max = Download(d_ar_max, n);
  for (int64_t i = 0; i < n; ++i) {
    if (ar[i] != value(0, i) + value(1, i)) return absl::StrCat("all-reduce sum element ", i);
    if (ar_max[i] != static_cast<float>(i)) return absl::StrCat("all-reduce max element ", i);
  }
  return "";
}

TEST(NcclCommunicatorTest, CollectivesMatchTheirDefinitions) { ExpectAllPassed(RunRanks(CollectivesBody)); }

// Rank 1 builds the group but never enters the all-reduce. Rank 0's call
// only queues it; synchronising its stream must end within the timeout
// (the watchdog aborts the group, which ends the NCCL kernel), and then the
// group reports ABORTED and stays aborted.
std::string MissingCollectivePeerBody(int rank, const std::string& dir) {
  if (cudaSetDevice(rank) != cudaSuccess) return "cudaSetDevice failed";
  FileRendezvousStore store(dir);
  const absl::Duration timeout = absl::Seconds(3);
  auto comm = CreateNcclCommunicator(&store, rank, kWorld, rank, timeout);
  if (!comm.ok()) return comm.status().ToString();
  float* buf = Upload(std::vector<float>(1024, 1.0f));
  const TensorDesc desc = MakeTensor(buf, DType::kFloat32, Shape{1024});
  if (rank == 1) {
    absl::SleepFor(timeout + absl::Seconds(5));  // alive, but absent from the collective
    return "";
  }
  const absl::Time start = absl::Now();
  absl::Status s = (*comm)->AllReduce(desc, ReduceOp::kSum, nullptr);
  if (!s.ok() && s.code() != absl::StatusCode::kAborted) {
    return absl::StrCat("want OK (queued) or ABORTED, got ", s.ToString());
  }
  if (cudaStreamSynchronize(nullptr) != cudaSuccess) return "stream synchronise failed";
  const absl::Duration took = absl::Now() - start;
  s = (*comm)->FirstFailure();
  if (s.code() != absl::StatusCode::kAborted) return absl::StrCat("want ABORTED, got ", s.ToString());
  if (took > timeout + absl::Seconds(3)) return absl::StrCat("abort took ", absl::FormatDuration(took));
  if ((*comm)->AllReduce(desc, ReduceOp::kSum, nullptr).code() != absl::StatusCode::kAborted) {
    return "the group was usable after ABORTED";
  }
  return "";
}

TEST(NcclCommunicatorTest, WatchdogAbortsACollectiveWithAnAbsentPeer) {
  ExpectAllPassed(RunRanks(MissingCollectivePeerBody));
}

// Rank 1 never joins the group at all: rank 0's initialisation is bounded
// by the timeout and comes back ABORTED.
std::string MissingInitPeerBody(int rank, const std::string& dir) {
  if (rank == 1) return "";  // never shows up
  if (cudaSetDevice(rank) != cudaSuccess) return "cudaSetDevice failed";
  FileRendezvousStore store(dir);
  const absl::Time start = absl::Now();
  auto comm = CreateNcclCommunicator(&store, rank, kWorld, rank, absl::Seconds(3));
  if (comm.ok()) return "a group formed without its second rank";
  if (comm.status().code() != absl::StatusCode::kAborted) {
    return absl::StrCat("want ABORTED, got ", comm.status().ToString());
  }
  if (absl::Now() - start > absl::Seconds(8)) return "initialisation was not bounded by the timeout";
  return "";
}

TEST(NcclCommunicatorTest, WatchdogBoundsInitialisationWithoutPeers) {
  ExpectAllPassed(RunRanks(MissingInitPeerBody));
}

// Delays a stream by `ms` milliseconds of host time (a host function on
// the stream), standing in for a long kernel before a collective.
void DelayStream(cudaStream_t stream, int ms) {
  static int delay_ms;
  delay_ms = ms;
  cudaLaunchHostFunc(
      stream, [](void*) { absl::SleepFor(absl::Milliseconds(delay_ms)); }, nullptr);
}

// A group of one: the all-reduce is queued behind 500 ms of other work on
// the caller's stream and must return long before that work is done; after
// a synchronise the result is right and the group healthy.
std::string QueuedCollectiveBody(int, const std::string&) {
  if (cudaSetDevice(0) != cudaSuccess) return "cudaSetDevice failed";
  auto comm = CreateNcclCommunicator(nullptr, 0, 1, 0, absl::Seconds(30));
  if (!comm.ok()) return comm.status().ToString();
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return "stream";
  float* buf = Upload(std::vector<float>(4096, 2.5f));
  const TensorDesc desc = MakeTensor(buf, DType::kFloat32, Shape{4096});
  for (int i = 0; i < 3; ++i) {  // the first call also sets NCCL up
    absl::Status s = (*comm)->AllReduce(desc, ReduceOp::kSum, reinterpret_cast<Stream*>(stream));
    if (!s.ok()) return s.ToString();
  }
  if (cudaStreamSynchronize(stream) != cudaSuccess) return "synchronise";
  DelayStream(stream, 500);
  const absl::Time start = absl::Now();
  absl::Status s = (*comm)->AllReduce(desc, ReduceOp::kMax, reinterpret_cast<Stream*>(stream));
  const absl::Duration call = absl::Now() - start;
  if (!s.ok()) return s.ToString();
  if (call > absl::Milliseconds(250)) {
    return absl::StrCat("the call waited for the device: ", absl::FormatDuration(call));
  }
  if (cudaStreamSynchronize(stream) != cudaSuccess) return "synchronise";
  if (absl::Now() - start < absl::Milliseconds(450)) return "the stream did not wait for the delay";
  for (float v : Download(buf, 4096)) {
    if (v != 2.5f) return absl::StrCat("all-reduce of one rank changed a value to ", v);
  }
  s = (*comm)->FirstFailure();
  return s.ok() ? "" : s.ToString();
}

TEST(NcclCommunicatorTest, CollectivesAreQueuedNotWaitedFor) {
  ExpectAllPassed(RunRanks(QueuedCollectiveBody, 1));
}

// A group of one with a 1 s timeout: the all-reduce is queued behind 4 s of
// other work. The call returns at once; the watchdog thread must fail the
// group about 1 s later while the caller's thread is free, and the stream
// must still drain (the aborted NCCL kernel ends).
std::string OverdueQueuedCollectiveBody(int, const std::string&) {
  if (cudaSetDevice(0) != cudaSuccess) return "cudaSetDevice failed";
  const absl::Duration timeout = absl::Seconds(1);
  auto comm = CreateNcclCommunicator(nullptr, 0, 1, 0, timeout);
  if (!comm.ok()) return comm.status().ToString();
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return "stream";
  float* buf = Upload(std::vector<float>(4096, 1.0f));
  const TensorDesc desc = MakeTensor(buf, DType::kFloat32, Shape{4096});
  absl::Status s = (*comm)->AllReduce(desc, ReduceOp::kSum, reinterpret_cast<Stream*>(stream));
  if (!s.ok()) return s.ToString();
  if (cudaStreamSynchronize(stream) != cudaSuccess) return "synchronise";
  DelayStream(stream, 4000);
  const absl::Time start = absl::Now();
  s = (*comm)->AllReduce(desc, ReduceOp::kSum, reinterpret_cast<Stream*>(stream));
  if (!s.ok()) return absl::StrCat("the call itself failed: ", s.ToString());
  absl::Duration failed_after = absl::InfiniteDuration();
  while (absl::Now() - start < absl::Seconds(3)) {
    if (!(*comm)->FirstFailure().ok()) {
      failed_after = absl::Now() - start;
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  s = (*comm)->FirstFailure();
  if (s.code() != absl::StatusCode::kAborted || !absl::StrContains(s.message(), "timed out")) {
    return absl::StrCat("want ABORTED (timed out) within 3 s, got ", s.ToString());
  }
  if (failed_after < timeout) {
    return absl::StrCat("failed before its timeout: ", absl::FormatDuration(failed_after));
  }
  if (cudaStreamSynchronize(stream) != cudaSuccess) return "the stream did not drain cleanly";
  if ((*comm)->AllReduce(desc, ReduceOp::kSum, nullptr).code() != absl::StatusCode::kAborted) {
    return "the group was usable after ABORTED";
  }
  return "";
}

TEST(NcclCommunicatorTest, WatchdogFailsAnOverdueQueuedCollective) {
  ExpectAllPassed(RunRanks(OverdueQueuedCollectiveBody, 1));
}

// Grouped, deferred collectives across two ranks: three all-gather parts
// (one of them empty), an fp32 and a bf16 reduce-scatter part, and two
// all-reduce buffers, each group launched at once and waited for on the
// caller's stream.
std::string GroupedCollectivesBody(int rank, const std::string& dir) {
  if (cudaSetDevice(rank) != cudaSuccess) return "cudaSetDevice failed";
  FileRendezvousStore store(dir);
  auto comm = CreateNcclCommunicator(&store, rank, kWorld, rank, absl::Seconds(60));
  if (!comm.ok()) return comm.status().ToString();
  const size_t sizes[3] = {333, 0, 4096};
  std::vector<uint8_t*> sends, recvs;
  std::vector<AllGatherPart> parts;
  for (int p = 0; p < 3; ++p) {
    std::vector<uint8_t> send(sizes[p]);
    for (size_t i = 0; i < sizes[p]; ++i) send[i] = static_cast<uint8_t>(i * 7 + rank * 31 + p);
    sends.push_back(Upload(send));
    recvs.push_back(Upload(std::vector<uint8_t>(kWorld * sizes[p], 0xEE)));
    parts.push_back(AllGatherPart{sends[p], recvs[p], sizes[p]});
  }
  absl::StatusOr<CollectiveTicket> gathered = (*comm)->StartAllGather(parts, nullptr);
  if (!gathered.ok()) return gathered.status().ToString();
  absl::Status s = (*comm)->WaitFor(*gathered, nullptr);
  if (!s.ok()) return s.ToString();
  for (int p = 0; p < 3; ++p) {
    std::vector<uint8_t> got = Download(recvs[p], kWorld * sizes[p]);
    for (int r = 0; r < kWorld; ++r) {
      for (size_t i = 0; i < sizes[p]; ++i) {
        if (got[r * sizes[p] + i] != static_cast<uint8_t>(i * 7 + r * 31 + p)) {
          return absl::StrCat("grouped all-gather part ", p, " byte ", r * sizes[p] + i);
        }
      }
    }
  }

  const int64_t n = 513;
  auto value = [](int r, int64_t i) { return static_cast<float>((i % 11) - 5 + 3 * r); };
  std::vector<float> send32(kWorld * n);
  std::vector<uint16_t> send16(kWorld * n);
  for (int64_t i = 0; i < kWorld * n; ++i) {
    send32[i] = value(rank, i);
    send16[i] = cpu::FloatToBf16(value(rank, i));
  }
  float* d_send32 = Upload(send32);
  float* d_recv32 = Upload(std::vector<float>(n, NAN));
  uint16_t* d_send16 = Upload(send16);
  uint16_t* d_recv16 = Upload(std::vector<uint16_t>(n, 0xFFFF));
  const ReduceScatterPart scatter[2] = {
      {MakeTensor(d_send32, DType::kFloat32, Shape{kWorld * n}),
       MakeTensor(d_recv32, DType::kFloat32, Shape{n})},
      {MakeTensor(d_send16, DType::kBFloat16, Shape{kWorld * n}),
       MakeTensor(d_recv16, DType::kBFloat16, Shape{n})}};
  absl::StatusOr<CollectiveTicket> reduced = (*comm)->StartReduceScatter(scatter, nullptr);
  if (!reduced.ok()) return reduced.status().ToString();
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = value(rank, i);
    b[i] = -value(rank, i);
  }
  float* d_a = Upload(a);
  float* d_b = Upload(b);
  const TensorDesc bufs[2] = {MakeTensor(d_a, DType::kFloat32, Shape{n}),
                              MakeTensor(d_b, DType::kFloat32, Shape{n})};
  absl::StatusOr<CollectiveTicket> summed = (*comm)->StartAllReduce(bufs, ReduceOp::kSum, nullptr);
  if (!summed.ok()) return summed.status().ToString();
  s = (*comm)->WaitFor(*reduced, nullptr);
  if (s.ok()) s = (*comm)->WaitFor(*summed, nullptr);
  if (!s.ok()) return s.ToString();
  std::vector<float> rs32 = Download(d_recv32, n);
  std::vector<uint16_t> rs16 = Download(d_recv16, n);
  a = Download(d_a, n);
  b = Download(d_b, n);
  for (int64_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < kWorld; ++r) want += value(r, rank * n + i);
    if (rs32[i] != want) return absl::StrCat("grouped reduce-scatter fp32 element ", i);
    if (cpu::Bf16ToFloat(rs16[i]) != want) return absl::StrCat("grouped reduce-scatter bf16 element ", i);
    const float sum = value(0, i) + value(1, i);
    if (a[i] != sum || b[i] != -sum) return absl::StrCat("grouped all-reduce element ", i);
  }
  // A bad part refuses the whole group, naming the sizes.
  const ReduceScatterPart bad[1] = {{MakeTensor(d_send32, DType::kFloat32, Shape{n}),
                                     MakeTensor(d_recv32, DType::kFloat32, Shape{n})}};
  if ((*comm)->StartReduceScatter(bad, nullptr).status().code() !=
      absl::StatusCode::kInvalidArgument) {
    return "a grouped reduce-scatter with send != world x recv was accepted";
  }
  s = (*comm)->FirstFailure();
  return s.ok() ? "" : s.ToString();
}

TEST(NcclCommunicatorTest, GroupedCollectivesMatchTheirDefinitions) {
  ExpectAllPassed(RunRanks(GroupedCollectivesBody));
}

// A group of one: a Start* collective queued behind 500 ms of work on one
// stream does not hold up a second stream until that stream waits for its
// ticket; and a ticket whose completion event the ring has since reused
// (more than 1024 collectives later) counts as finished.
std::string DeferredWaitBody(int, const std::string&) {
  if (cudaSetDevice(0) != cudaSuccess) return "cudaSetDevice failed";
  auto comm = CreateNcclCommunicator(nullptr, 0, 1, 0, absl::Seconds(30));
  if (!comm.ok()) return comm.status().ToString();
  cudaStream_t producer = nullptr, consumer = nullptr;
  if (cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) != cudaSuccess) {
    return "stream";
  }
  float* buf = Upload(std::vector<float>(1024, 1.5f));
  const TensorDesc desc[1] = {MakeTensor(buf, DType::kFloat32, Shape{1024})};
  auto* after = reinterpret_cast<Stream*>(producer);
  absl::StatusOr<CollectiveTicket> first = (*comm)->StartAllReduce(desc, ReduceOp::kMax, after);
  if (!first.ok()) return first.status().ToString();
  if (cudaStreamSynchronize(producer) != cudaSuccess) return "synchronise";
  DelayStream(producer, 500);
  absl::StatusOr<CollectiveTicket> late = (*comm)->StartAllReduce(desc, ReduceOp::kMax, after);
  if (!late.ok()) return late.status().ToString();
  if (cudaStreamQuery(consumer) != cudaSuccess) return "the consumer waited without WaitFor";
  absl::Status s = (*comm)->WaitFor(*late, reinterpret_cast<Stream*>(consumer));
  if (!s.ok()) return s.ToString();
  if (cudaStreamQuery(consumer) != cudaErrorNotReady) return "WaitFor did not order the consumer";
  if (cudaStreamSynchronize(consumer) != cudaSuccess) return "synchronise consumer";
  if (cudaStreamQuery(producer) != cudaSuccess) return "the consumer finished before the collective";
  for (int i = 0; i < 1100; ++i) {
    absl::StatusOr<CollectiveTicket> t = (*comm)->StartAllReduce(desc, ReduceOp::kMax, after);
    if (!t.ok()) return t.status().ToString();
  }
  s = (*comm)->WaitFor(*first, reinterpret_cast<Stream*>(consumer));
  if (!s.ok()) return absl::StrCat("a retired ticket: ", s.ToString());
  if (cudaStreamSynchronize(producer) != cudaSuccess) return "synchronise";
  for (float v : Download(buf, 1024)) {
    if (v != 1.5f) return absl::StrCat("all-reduce of one rank changed a value to ", v);
  }
  s = (*comm)->FirstFailure();
  return s.ok() ? "" : s.ToString();
}

TEST(NcclCommunicatorTest, StartedCollectivesOrderOnlyTheStreamsThatWaitForThem) {
  ExpectAllPassed(RunRanks(DeferredWaitBody, 1));
}

TEST(NcclCommunicatorTest, RejectsBadRanks) {
  EXPECT_EQ(CreateNcclCommunicator(nullptr, 2, 2, 0, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateNcclCommunicator(nullptr, 0, 0, 0, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
