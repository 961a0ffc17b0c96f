// RendezvousClient against an in-process fake Rendezvous service over
// loopback: values round-trip byte for byte, keys are scoped to the job,
// Get waits for late keys and maps its timeout onto the RPC, Add is atomic
// across callers, and an absent coordinator reads as UNAVAILABLE.
#include "worker/daemon/rendezvous_client.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/daemon/fake_rendezvous_service.h"
#include "worker/daemon/loopback_server_for_test.h"

namespace tessera {
namespace {

std::string RandomBytes(std::mt19937& rng, int n) {
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);  // NULs included
  return out;
}

class RendezvousClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartLoopbackServer({&service_});
    ASSERT_NE(server_.server, nullptr);
  }
  void TearDown() override {
    if (server_.server) server_.server->Shutdown();
  }

  FakeRendezvousService service_;
  LoopbackServer server_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(RendezvousClientTest, SetThenGetReturnsValuesInKeyOrder) {
  RendezvousClient client(server_.address(), "job-a");
  const std::string v0 = RandomBytes(rng_, 1 + rng_() % 300);
  const std::string v1 = RandomBytes(rng_, 1 + rng_() % 300);
  ASSERT_TRUE(client.Set("rank/0", v0).ok());
  ASSERT_TRUE(client.Set("rank/1", v1).ok());
  absl::StatusOr<std::vector<std::string>> got = client.Get({"rank/1", "rank/0"}, absl::Seconds(1));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0], v1);
  EXPECT_EQ((*got)[1], v0);
  // Overwrite.
  const std::string v2 = RandomBytes(rng_, 17);
  ASSERT_TRUE(client.Set("rank/0", v2).ok());
  got = client.Get({"rank/0"}, absl::Seconds(1));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0], v2);
}

TEST_F(RendezvousClientTest, KeysAreScopedToTheJob) {
  RendezvousClient a(server_.address(), "job-a");
  RendezvousClient b(server_.address(), "job-b");
  const std::string value = RandomBytes(rng_, 32);
  ASSERT_TRUE(a.Set("nccl_id", value).ok());
  std::string stored;
  ASSERT_TRUE(service_.Lookup("job-a", "nccl_id", &stored));
  EXPECT_EQ(stored, value);
  EXPECT_FALSE(service_.Lookup("job-b", "nccl_id", &stored));
  EXPECT_EQ(b.Get({"nccl_id"}, absl::Milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST_F(RendezvousClientTest, GetWaitsForAKeySetLater) {
  RendezvousClient reader(server_.address(), "job-a");
  RendezvousClient writer(server_.address(), "job-a");
  const std::string value = RandomBytes(rng_, 64);
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(150));
    ASSERT_TRUE(writer.Set("late", value).ok());
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<std::string>> got = reader.Get({"late"}, absl::Seconds(5));
  late.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0], value);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_EQ(service_.last_get_timeout_ms(), 5000);
}

TEST_F(RendezvousClientTest, GetTimesOutWithDeadlineExceeded) {
  RendezvousClient client(server_.address(), "job-a");
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<std::string>> got = client.Get({"never"}, absl::Milliseconds(200));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(service_.last_get_timeout_ms(), 200);
  EXPECT_GE(took, absl::Milliseconds(180));  // the coordinator waited, as asked
  EXPECT_LT(took, absl::Seconds(3));         // and nobody waited much longer
}

TEST_F(RendezvousClientTest, HugeTimeoutIsClampedToTheWireType) {
  RendezvousClient client(server_.address(), "job-a");
  ASSERT_TRUE(client.Set("k", "v").ok());
  ASSERT_TRUE(client.Get({"k"}, absl::InfiniteDuration()).ok());
  EXPECT_EQ(service_.last_get_timeout_ms(), std::numeric_limits<int32_t>::max());
}

TEST_F(RendezvousClientTest, AddIsAtomicAcrossCallers) {
  const int kThreads = 4;
  const int kAdds = 5 + static_cast<int>(rng_() % 10);
  const int64_t step = 1 + static_cast<int64_t>(rng_() % 7);
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> seen(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RendezvousClient client(server_.address(), "job-a");
      for (int i = 0; i < kAdds; ++i) {
        absl::StatusOr<int64_t> v = client.Add("counter", step);
        ASSERT_TRUE(v.ok()) << v.status();
        seen[t].push_back(*v);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int64_t> all;
  for (auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kAdds));
  // Every intermediate total appears exactly once.
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], step * static_cast<int64_t>(i + 1));
  RendezvousClient client(server_.address(), "job-a");
  absl::StatusOr<std::vector<std::string>> text = client.Get({"counter"}, absl::Seconds(1));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ((*text)[0], absl::StrCat(step * kThreads * kAdds));
}

TEST(RendezvousClientUnreachable, CallsFailWithUnavailable) {
  // Take a free port, then close it again so nothing listens there.
  FakeRendezvousService service;
  LoopbackServer gone = StartLoopbackServer({&service});
  ASSERT_NE(gone.server, nullptr);
  const std::string address = gone.address();
  gone.server->Shutdown();
  gone.server.reset();
  RendezvousClient client(address, "job-a");
  EXPECT_EQ(client.Set("k", "v").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.Add("k", 1).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(client.Get({"k"}, absl::Milliseconds(100)).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tessera
