// The default loss chunk keeps one chunk of bf16 logits within 256 MiB,
// between one token and the micro-batch limit, and an explicit value is
// kept. (server/spec_validation_test.cc checks the other defaults, and that
// a spec with them filled in still validates.)
#include "common/spec_defaults.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

TEST(SpecDefaults, DefaultLossChunkKeepsBf16LogitsWithin256MiB) {
  v1::JobSpec spec;
  spec.mutable_model()->set_vocab_size(32768);
  EXPECT_EQ(WithDefaults(spec).loss_chunk_tokens(), 4096);
  spec.mutable_model()->set_vocab_size(131072);
  EXPECT_EQ(WithDefaults(spec).loss_chunk_tokens(), 1024);
  spec.mutable_model()->set_vocab_size(300000000);  // more than fits: one token per chunk
  EXPECT_EQ(WithDefaults(spec).loss_chunk_tokens(), 1);
  spec.mutable_model()->set_vocab_size(16);  // tiny vocab: capped at the micro-batch limit
  EXPECT_EQ(WithDefaults(spec).loss_chunk_tokens(), 1 << 20);
  spec.set_loss_chunk_tokens(77);
  EXPECT_EQ(WithDefaults(spec).loss_chunk_tokens(), 77);  // explicit values are kept
}

}  // namespace
}  // namespace tessera
