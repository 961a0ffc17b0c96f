// Tests that the status macros propagate errors and bind values.
#include "common/status_macros.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status QuarterInto(int x, int* out) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(*out, Half(half));
  return absl::OkStatus();
}

absl::Status FailIfNegative(int x) {
  RETURN_IF_ERROR(x < 0 ? absl::OutOfRangeError("negative") : absl::OkStatus());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignBindsValues) {
  int out = 0;
  ASSERT_TRUE(QuarterInto(12, &out).ok());
  EXPECT_EQ(out, 3);
}

TEST(StatusMacros, AssignPropagatesError) {
  int out = -1;
  absl::Status s = QuarterInto(6, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out, -1);
}

TEST(StatusMacros, ReturnIfError) {
  EXPECT_TRUE(FailIfNegative(1).ok());
  EXPECT_EQ(FailIfNegative(-1).code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace tessera
