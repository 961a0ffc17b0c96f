// ListJobs page sizes and tokens: defaults and the maximum, negative sizes,
// the listing order, tokens that round-trip, and tokens that are malformed,
// oversized or made for another filter.
#include "server/job_pagination.h"

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(JobPagination, PageSizeDefaultsAndIsCappedAndNeverNegative) {
  EXPECT_EQ(*ResolvePageSize(0), kDefaultJobsPageSize);
  EXPECT_EQ(*ResolvePageSize(1), 1);
  EXPECT_EQ(*ResolvePageSize(kMaxJobsPageSize), kMaxJobsPageSize);
  EXPECT_EQ(*ResolvePageSize(kMaxJobsPageSize + 1), kMaxJobsPageSize);
  absl::StatusOr<int> negative = ResolvePageSize(-1);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.status().message().rfind("page_size: ", 0), 0u);
}

TEST(JobPagination, NewestFirstThenHigherJobNumbers) {
  EXPECT_TRUE(ListedBefore({20, "job-1"}, {10, "job-2"}));
  EXPECT_TRUE(ListedBefore({10, "job-10"}, {10, "job-9"}));
  EXPECT_TRUE(ListedBefore({10, "job-3"}, {10, "job-2"}));
  EXPECT_FALSE(ListedBefore({10, "job-2"}, {10, "job-2"}));
}

TEST(JobPagination, TokensRoundTripPerFilter) {
  const uint64_t all = FilterFingerprint({});
  const uint64_t pending = FilterFingerprint({v1::PENDING});
  EXPECT_EQ(FilterFingerprint({v1::PENDING, v1::RUNNING}),
            FilterFingerprint({v1::RUNNING, v1::PENDING}));
  EXPECT_NE(all, pending);

  auto first = DecodePageToken("", all);
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first->has_value());

  const std::string token = EncodePageToken({1234567, "job-42"}, pending);
  auto decoded = DecodePageToken(token, pending);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(decoded->has_value());
  EXPECT_EQ((*decoded)->create_time_unix_ms, 1234567);
  EXPECT_EQ((*decoded)->job_id, "job-42");

  auto other_filter = DecodePageToken(token, all);
  EXPECT_EQ(other_filter.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(other_filter.status().message().find("different states filter"), std::string::npos);
}

TEST(JobPagination, TheOwnerFilterIsPartOfTheFingerprint) {
  EXPECT_EQ(FilterFingerprint({v1::RUNNING}, ""), FilterFingerprint({v1::RUNNING}));
  const uint64_t alice = FilterFingerprint({v1::RUNNING}, "alice");
  EXPECT_NE(alice, FilterFingerprint({v1::RUNNING}));
  EXPECT_NE(alice, FilterFingerprint({v1::RUNNING}, "bob"));
  EXPECT_NE(alice, FilterFingerprint({}, "alice"));
  const std::string token = EncodePageToken({1, "job-1"}, alice);
  EXPECT_TRUE(DecodePageToken(token, alice).ok());
  EXPECT_EQ(DecodePageToken(token, FilterFingerprint({v1::RUNNING}, "bob")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(JobPagination, MalformedTokensAreInvalidArgument) {
  const uint64_t all = FilterFingerprint({});
  for (const std::string& token :
       {std::string("not base64!"), absl::WebSafeBase64Escape("v2:0:1:job-1"),
        absl::WebSafeBase64Escape("v1:0:x:job-1"), absl::WebSafeBase64Escape("v1:0:1:"),
        absl::WebSafeBase64Escape("v1:0:1"), std::string(5000, 'A')}) {
    auto decoded = DecodePageToken(token, all);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << token;
    EXPECT_EQ(decoded.status().message().rfind("page_token: ", 0), 0u) << decoded.status();
  }
}

}  // namespace
}  // namespace tessera
