// EstimateCheckpointSize: the Llama-3-8B shape has its published parameter
// count and about 13 bytes per FP8 block parameter; bf16 block linears add a
// byte each; hybrid sharding writes one shard group's files. The bytes a
// real checkpoint writes are checked in worker/trainer/fsdp_checkpoint_test.
#include "common/checkpoint_size.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::JobSpec Llama3_8B() {
  v1::JobSpec spec;
  v1::ModelConfig& m = *spec.mutable_model();
  m.set_vocab_size(128256);
  m.set_d_model(4096);
  m.set_n_layers(32);
  m.set_n_heads(32);
  m.set_n_kv_heads(8);
  m.set_ffn_dim(14336);
  m.set_seq_len(8192);
  spec.set_world_size(4);
  return spec;
}

TEST(CheckpointSizeTest, TheEightBillionShapeIsAbout98GiB) {
  const CheckpointSize size = EstimateCheckpointSize(Llama3_8B());
  EXPECT_EQ(size.parameters, 8030261248);
  EXPECT_EQ(size.writing_ranks, 4);
  // 12 bytes of fp32 state per parameter, plus 1 (e4m3 block linears) or 2
  // (bf16 embedding, norms, LM head).
  const int64_t outer = 2 * int64_t{128256} * 4096 + 65 * 4096;
  const int64_t data = size.parameters * 12 + (size.parameters - outer) + 2 * outer;
  EXPECT_GT(size.state_bytes, data);
  EXPECT_LT(size.state_bytes, data + 4 * (int64_t{1} << 20));
  EXPECT_GT(size.total_bytes, size.state_bytes);
  EXPECT_NEAR(static_cast<double>(size.total_bytes) / (int64_t{1} << 30), 98.2, 0.05);
}

TEST(CheckpointSizeTest, Bf16BlockLinearsAddOneBytePerParameter) {
  v1::JobSpec fp8 = Llama3_8B();
  v1::JobSpec bf16 = fp8;
  bf16.mutable_fp8()->set_disabled(true);
  const int64_t outer = 2 * int64_t{128256} * 4096 + 65 * 4096;
  EXPECT_EQ(EstimateCheckpointSize(bf16).state_bytes - EstimateCheckpointSize(fp8).state_bytes,
            EstimateCheckpointSize(fp8).parameters - outer);
}

TEST(CheckpointSizeTest, HybridShardingWritesOneShardGroup) {
  v1::JobSpec plain = Llama3_8B();
  plain.set_world_size(2);
  v1::JobSpec hybrid = Llama3_8B();
  hybrid.set_world_size(4);
  hybrid.mutable_parallelism()->set_shard_group_size(2);
  EXPECT_EQ(EstimateCheckpointSize(hybrid).writing_ranks, 2);
  EXPECT_EQ(EstimateCheckpointSize(hybrid).total_bytes, EstimateCheckpointSize(plain).total_bytes);
}

}  // namespace
}  // namespace tessera
