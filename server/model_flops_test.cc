// MFU inputs: the FLOPs-per-token formula on a hand-counted model and on the
// 221M benchmark model, and the device peak lookup.
#include "server/model_flops.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(ModelFlopsTest, CountsEveryProductOfATinyModelByHand) {
  v1::ModelConfig m;
  m.set_vocab_size(10);
  m.set_d_model(4);
  m.set_n_layers(1);
  m.set_n_heads(2);     // head dim 2
  m.set_n_kv_heads(1);  // qkv width (2 + 2) * 2 = 8
  m.set_ffn_dim(3);
  m.set_seq_len(5);
  // Weights: qkv 4*8 = 32, out 4*4 = 16, gate_up 4*6 = 24, down 3*4 = 12,
  // head 10*4 = 40: 124. Attention: 3 * 4 * (heads*hd = 4) * (5+1)/2 = 144.
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(m), 6.0 * 124 + 144);
  m.set_n_kv_heads(0);  // 0 means n_heads: qkv width 12, qkv 48
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(m), 6.0 * 140 + 144);
}

TEST(ModelFlopsTest, The221MBenchmarkModelIsAboutSixTimesItsWeightsPlusAttention) {
  v1::ModelConfig m;
  m.set_vocab_size(32768);
  m.set_d_model(1024);
  m.set_n_layers(12);
  m.set_n_heads(16);
  m.set_ffn_dim(2816);
  m.set_seq_len(2048);
  // 12 blocks of 4 + 1 + 8.25 (in d^2 units: qkv 3, out 1, gate_up 5.5, down
  // 2.75) = 12.25 d^2, plus the 32768 x 1024 head.
  const double weights = 12 * 12.25 * 1024.0 * 1024 + 32768.0 * 1024;
  const double attention = 12 * 12.0 * 1024 * 2049 / 2;
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(m), 6 * weights + attention);
  EXPECT_NEAR(TrainingFlopsPerToken(m) / 1e9, 1.277, 0.001);
}

TEST(ModelFlopsTest, PeaksOfKnownGpusAndNoneForOthers) {
  EXPECT_EQ(PeakBf16FlopsPerSecond("NVIDIA H100 80GB HBM3"), 989e12);
  EXPECT_EQ(PeakBf16FlopsPerSecond("NVIDIA H100 PCIe"), 756e12);
  EXPECT_EQ(PeakBf16FlopsPerSecond("NVIDIA H200"), 989e12);
  EXPECT_EQ(PeakBf16FlopsPerSecond("cpu (2 cores)"), 0.0);
  EXPECT_EQ(PeakBf16FlopsPerSecond(""), 0.0);
}

}  // namespace
}  // namespace tessera
