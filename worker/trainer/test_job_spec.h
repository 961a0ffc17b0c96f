// The small jobs the trainer tests train. TestJobSpec suits the GPU as well
// as the CPU: its head dim is 64 (the CUDA engine's attention supports head
// dims 64 and 128 only), its attention is grouped-query (2 query heads
// sharing 1 key/value head, so GQA runs in the GPU tests too), and every FP8
// GEMM dimension is a multiple of 16, as cuBLASLt's FP8 kernels require:
// d_model 128, qkv width (2 + 2*1) * 64 = 256, gate_up 2 * 128 = 256, ffn
// 128, and T = micro_batch * 32 tokens. CPU tests use the tiny variants
// below, whose dimensions only the CPU engine accepts.
#ifndef TESSERA_WORKER_TRAINER_TEST_JOB_SPEC_H_
#define TESSERA_WORKER_TRAINER_TEST_JOB_SPEC_H_

#include "proto/tessera/v1/job.pb.h"

namespace tessera {

inline v1::JobSpec TestJobSpec(int micro_batch) {
  v1::JobSpec spec;
  v1::ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(256);
  m->set_d_model(128);
  m->set_n_layers(2);
  m->set_n_heads(2);
  m->set_n_kv_heads(1);
  m->set_ffn_dim(128);
  m->set_seq_len(32);
  m->set_norm_eps(1e-5f);
  m->set_rope_theta(10000.f);
  spec.mutable_data()->set_micro_batch_size(micro_batch);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::ADDITION);
  spec.mutable_data()->mutable_synthetic()->set_num_tokens(100000);
  v1::OptimizerConfig* o = spec.mutable_optimizer();
  o->set_lr(3e-3f);
  o->set_beta1(0.9f);
  o->set_beta2(0.95f);
  o->set_eps(1e-8f);
  o->set_weight_decay(0.01f);
  o->set_grad_clip_norm(1.0f);
  o->set_schedule(v1::OptimizerConfig::CONSTANT);
  spec.mutable_fp8()->mutable_delayed()->set_amax_history_len(4);
  spec.set_steps(1000);
  spec.set_seed(5);
  spec.set_loss_chunk_tokens(64);
  return spec;
}

// The test job shrunk for the CPU engine, so that a step takes milliseconds:
// d_model 32 with 2 heads of 16, multi-head attention (n_kv_heads left 0,
// which means n_heads, as in a spec that never went through the
// coordinator's defaults).
inline v1::JobSpec TinyCpuTestJobSpec(int micro_batch) {
  v1::JobSpec spec = TestJobSpec(micro_batch);
  v1::ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(64);
  m->set_d_model(32);
  m->set_n_kv_heads(0);
  m->set_ffn_dim(48);
  m->set_seq_len(16);
  spec.mutable_data()->mutable_synthetic()->set_num_tokens(50000);
  spec.set_seed(11);
  spec.set_loss_chunk_tokens(24);
  return spec;
}

// The tiny job with grouped-query attention: 4 query heads of 8 sharing
// n_kv_heads key/value heads (qkv width (4 + 2 * n_kv_heads) * 8).
inline v1::JobSpec TinyCpuGqaTestJobSpec(int micro_batch, int n_kv_heads) {
  v1::JobSpec spec = TinyCpuTestJobSpec(micro_batch);
  spec.mutable_model()->set_n_heads(4);
  spec.mutable_model()->set_n_kv_heads(n_kv_heads);
  return spec;
}

}  // namespace tessera

#endif  // TESSERA_WORKER_TRAINER_TEST_JOB_SPEC_H_
