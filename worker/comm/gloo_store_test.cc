// GlooStore forwards Gloo's bootstrap calls to a RendezvousStore: values
// (binary, with NUL bytes) round-trip under the prefix, a wait returns once
// another thread sets the keys, and a key that never appears makes get/wait
// throw gloo::IoException after the timeout instead of blocking.
#include "worker/comm/gloo_store.h"

#include <map>
#include <random>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gloo/common/error.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// In-memory RendezvousStore for one process.
class MemoryStore : public RendezvousStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    absl::MutexLock lock(&mu_);
    values_[key] = value;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout) override {
    absl::MutexLock lock(&mu_);
    auto all_present = [&] {
      for (const std::string& k : keys) {
        if (values_.count(k) == 0) return false;
      }
      return true;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&all_present), timeout)) {
      return absl::DeadlineExceededError("keys missing");
    }
    std::vector<std::string> out;
    for (const std::string& k : keys) out.push_back(values_[k]);
    return out;
  }
  absl::StatusOr<int64_t> Add(const std::string&, int64_t) override {
    return absl::UnimplementedError("not used by Gloo");
  }
  bool Has(const std::string& key) {
    absl::MutexLock lock(&mu_);
    return values_.count(key) > 0;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::string> values_;
};

TEST(GlooStore, BinaryValuesRoundTripUnderThePrefix) {
  MemoryStore backing;
  GlooStore store(&backing, absl::Seconds(1), "g/");
  std::mt19937 rng(std::random_device{}());
  std::vector<char> value(300);
  for (char& c : value) c = static_cast<char>(rng());
  value[7] = '\0';
  store.set("rank_1", value);
  EXPECT_TRUE(backing.Has("g/rank_1"));
  EXPECT_FALSE(backing.Has("rank_1"));
  EXPECT_EQ(store.get("rank_1"), value);
}

TEST(GlooStore, WaitReturnsWhenAnotherThreadSetsTheKeys) {
  MemoryStore backing;
  GlooStore store(&backing, absl::Seconds(5));
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    GlooStore other(&backing, absl::Seconds(5));
    other.set("a", {'1'});
    other.set("b", {'2'});
  });
  const absl::Time start = absl::Now();
  EXPECT_NO_THROW(store.wait({"a", "b"}));
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  setter.join();
  EXPECT_EQ(store.get("b"), std::vector<char>{'2'});
}

TEST(GlooStore, MissingKeyThrowsIoExceptionAfterTheTimeout) {
  MemoryStore backing;
  GlooStore store(&backing, absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  EXPECT_THROW(store.get("never"), gloo::IoException);
  EXPECT_THROW(store.wait({"never"}), gloo::IoException);
  EXPECT_THROW(store.wait({"never"}, std::chrono::milliseconds(50)), gloo::IoException);
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Milliseconds(240));
  EXPECT_LT(took, absl::Seconds(3));
}

}  // namespace
}  // namespace tessera
