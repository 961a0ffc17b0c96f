// ShadowGapWarning: silent within the threshold, a warning past it in either
// direction or on a non-finite loss; 0 means the default threshold.
#include "common/shadow_gap.h"

#include <limits>

#include "common/spec_limits.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(ShadowGap, ZeroMeansTheDefaultThreshold) {
  v1::Fp8Recipe recipe;
  EXPECT_EQ(ShadowGapThreshold(recipe), kDefaultShadowGapWarn);
  recipe.set_shadow_gap_warn(0.25f);
  EXPECT_EQ(ShadowGapThreshold(recipe), 0.25f);
}

TEST(ShadowGap, WarnsOnlyPastTheThresholdEitherWay) {
  v1::Fp8Recipe recipe;
  recipe.set_shadow_gap_warn(0.5f);
  EXPECT_EQ(ShadowGapWarning(recipe, 3.25f, 3.0f), "");
  EXPECT_EQ(ShadowGapWarning(recipe, 3.0f, 3.25f), "");
  EXPECT_EQ(ShadowGapWarning(recipe, 3.5f, 3.0f), "");  // exactly at it
  const std::string above = ShadowGapWarning(recipe, 4.0f, 3.0f);
  EXPECT_NE(above.find("+1.0000"), std::string::npos) << above;
  EXPECT_NE(above.find("fp8.shadow_gap_warn 0.5"), std::string::npos) << above;
  EXPECT_NE(ShadowGapWarning(recipe, 2.0f, 3.0f).find("-1.0000"), std::string::npos);
}

TEST(ShadowGap, WarnsWhenALossIsNotFinite) {
  const v1::Fp8Recipe recipe;
  EXPECT_NE(ShadowGapWarning(recipe, std::numeric_limits<float>::quiet_NaN(), 3.0f), "");
  EXPECT_NE(ShadowGapWarning(recipe, std::numeric_limits<float>::infinity(), 3.0f), "");
}

}  // namespace
}  // namespace tessera
