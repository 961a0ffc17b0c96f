// JobSpec.priority: the range's edges are accepted, one past either edge is
// INVALID_ARGUMENT naming the field, the range and the value, and unset
// means the default.
#include "common/job_priority.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::JobSpec WithPriority(int p) {
  v1::JobSpec spec;
  spec.set_priority(p);
  return spec;
}

TEST(JobPriority, AcceptsTheRangeAndUnset) {
  for (int p : {0, kMinJobPriority, kDefaultJobPriority, kMaxJobPriority}) {
    EXPECT_TRUE(CheckJobPriority(WithPriority(p)).ok()) << p;
  }
}

TEST(JobPriority, RefusesValuesOutsideTheRangeNamingTheField) {
  for (int p : {-1, kMaxJobPriority + 1, 1000000}) {
    const absl::Status s = CheckJobPriority(WithPriority(p));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << p;
    EXPECT_EQ(s.message(),
              absl::StrCat("priority: must be in [1, 9], or 0 for the default 5 (got ", p, ")"));
  }
}

TEST(JobPriority, UnsetMeansTheDefault) {
  EXPECT_EQ(EffectiveJobPriority(WithPriority(0)), kDefaultJobPriority);
  EXPECT_EQ(EffectiveJobPriority(WithPriority(2)), 2);
  EXPECT_EQ(EffectiveJobPriority(WithPriority(9)), 9);
}

}  // namespace
}  // namespace tessera
