// See tiny_job_spec_for_test.h.
#include "server/tiny_job_spec_for_test.h"

namespace tessera {

v1::JobSpec TinyJobSpec(int world_size, int steps) {
  v1::JobSpec spec;
  v1::ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(256);
  m->set_d_model(32);
  m->set_n_layers(1);
  m->set_n_heads(2);
  m->set_ffn_dim(64);
  m->set_seq_len(16);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::COPY);
  spec.mutable_data()->set_micro_batch_size(2);
  spec.mutable_optimizer()->set_lr(1e-3f);
  spec.set_world_size(world_size);
  spec.set_steps(steps);
  return spec;
}

}  // namespace tessera
