// Embedding gather / scatter-add, and the elementwise Add and Cast.
#include "worker/engine/cpu/embedding.h"

#include "gtest/gtest.h"
#include "worker/engine/cpu/elementwise.h"
#include "worker/engine/cpu/reference_test_util.h"

namespace tessera {
namespace cpu {
namespace {

using namespace tessera::testing;

TEST(Embedding, GatherAndDeterministicScatterAdd) {
  const int v = 11, h = 6, t = 9;
  auto table = ToBf16(RandomFloats(v * h, 41));
  std::vector<int32_t> ids = {3, 0, 10, 3, 3, 7, 0, 1, 10};
  std::vector<float> out(t * h, NAN);
  TensorDesc I = MakeTensor(ids.data(), DType::kInt32, Shape{t});
  ASSERT_TRUE(EmbeddingForward(I, MakeTensor(table.data(), DType::kBFloat16, Shape{v, h}),
                               MakeTensor(out.data(), DType::kFloat32, Shape{t, h}))
                  .ok());
  for (int i = 0; i < t; ++i) {
    for (int j = 0; j < h; ++j) EXPECT_EQ(out[i * h + j], Bf16ToFloat(table[ids[i] * h + j]));
  }
  std::vector<float> g = RandomFloats(t * h, 42);
  std::vector<float> grad(v * h, 0.5f);
  std::vector<double> want(v * h, 0.5);
  for (int i = 0; i < t; ++i) {
    for (int j = 0; j < h; ++j) want[ids[i] * h + j] += g[i * h + j];
  }
  ASSERT_TRUE(EmbeddingBackward(I, MakeTensor(g.data(), DType::kFloat32, Shape{t, h}),
                                MakeTensor(grad.data(), DType::kFloat32, Shape{v, h}))
                  .ok());
  EXPECT_LT(RelativeError(grad, want), 1e-6);
  ids[4] = v;  // out of range
  absl::Status s = EmbeddingForward(I, MakeTensor(table.data(), DType::kBFloat16, Shape{v, h}),
                                    MakeTensor(out.data(), DType::kFloat32, Shape{t, h}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("position 4"), std::string::npos) << s;
}

TEST(Elementwise, AddAndCastRoundToTheOutputDtype) {
  std::vector<float> a = RandomFloats(37, 51), b = RandomFloats(37, 52);
  std::vector<uint16_t> out(37);
  Poison(out);
  ASSERT_TRUE(Add(MakeTensor(a.data(), DType::kFloat32, Shape{37}),
                  MakeTensor(b.data(), DType::kFloat32, Shape{37}),
                  MakeTensor(out.data(), DType::kBFloat16, Shape{37}))
                  .ok());
  for (int i = 0; i < 37; ++i) EXPECT_EQ(out[i], FloatToBf16(a[i] + b[i]));
  // In place: out aliases a.
  ASSERT_TRUE(Add(MakeTensor(a.data(), DType::kFloat32, Shape{37}),
                  MakeTensor(b.data(), DType::kFloat32, Shape{37}),
                  MakeTensor(a.data(), DType::kFloat32, Shape{37}))
                  .ok());
  std::vector<float> back(37, NAN);
  ASSERT_TRUE(Cast(MakeTensor(out.data(), DType::kBFloat16, Shape{37}),
                   MakeTensor(back.data(), DType::kFloat32, Shape{37}))
                  .ok());
  for (int i = 0; i < 37; ++i) EXPECT_EQ(back[i], Bf16ToFloat(out[i]));
  EXPECT_FALSE(Add(MakeTensor(a.data(), DType::kFloat32, Shape{37}),
                   MakeTensor(b.data(), DType::kFloat32, Shape{36}),
                   MakeTensor(a.data(), DType::kFloat32, Shape{37}))
                   .ok());
}

}  // namespace
}  // namespace cpu
}  // namespace tessera
