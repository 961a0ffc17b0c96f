// PrefixedRendezvousStore: two views with different prefixes over one store
// do not see each other's keys, and the base store holds the prefixed names.
#include "worker/comm/prefixed_rendezvous_store.h"

#include <map>

#include "gtest/gtest.h"

namespace tessera {
namespace {

// An in-memory store whose Get fails for a missing key instead of waiting.
class MapStore : public RendezvousStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    values_[key] = value;
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration) override {
    std::vector<std::string> out;
    for (const std::string& k : keys) {
      auto it = values_.find(k);
      if (it == values_.end()) return absl::DeadlineExceededError(k);
      out.push_back(it->second);
    }
    return out;
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t increment) override {
    return counters_[key] += increment;
  }
  std::map<std::string, std::string> values_;
  std::map<std::string, int64_t> counters_;
};

TEST(PrefixedRendezvousStore, ViewsWithDifferentPrefixesAreSeparate) {
  MapStore base;
  PrefixedRendezvousStore shard(&base, "shard/0/"), replica(&base, "replica/1/");
  ASSERT_TRUE(shard.Set("nccl/unique_id", "a").ok());
  ASSERT_TRUE(replica.Set("nccl/unique_id", "b").ok());
  EXPECT_EQ(shard.Get({"nccl/unique_id"}, absl::Seconds(1)).value()[0], "a");
  EXPECT_EQ(replica.Get({"nccl/unique_id"}, absl::Seconds(1)).value()[0], "b");
  EXPECT_EQ(base.values_.at("shard/0/nccl/unique_id"), "a");
  EXPECT_EQ(base.values_.count("nccl/unique_id"), 0u);
  EXPECT_EQ(shard.Add("n", 2).value(), 2);
  EXPECT_EQ(replica.Add("n", 5).value(), 5);
  EXPECT_EQ(shard.Add("n", 1).value(), 3);
  EXPECT_FALSE(replica.Get({"missing"}, absl::Seconds(1)).ok());
}

TEST(PrefixedRendezvousStore, NoBaseStoreIsAnErrorNotACrash) {
  PrefixedRendezvousStore none(nullptr, "p/");
  EXPECT_EQ(none.Set("k", "v").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.Get({"k"}, absl::Seconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.Add("k", 1).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera
