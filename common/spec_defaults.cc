// JobSpec defaults (see spec_defaults.h).
#include "common/spec_defaults.h"

#include <algorithm>
#include <cstdint>

#include "common/job_priority.h"
#include "common/spec_limits.h"

namespace tessera {

v1::JobSpec WithDefaults(const v1::JobSpec& in) {
  v1::JobSpec spec = in;
  v1::ModelConfig* m = spec.mutable_model();
  if (m->norm_eps() == 0) m->set_norm_eps(1e-5f);
  if (m->rope_theta() == 0) m->set_rope_theta(10000.f);
  if (m->n_kv_heads() == 0) m->set_n_kv_heads(m->n_heads());
  v1::OptimizerConfig* o = spec.mutable_optimizer();
  if (o->beta1() == 0) o->set_beta1(0.9f);
  if (o->beta2() == 0) o->set_beta2(0.95f);
  if (o->eps() == 0) o->set_eps(1e-8f);
  if (o->schedule() == v1::OptimizerConfig::SCHEDULE_UNSPECIFIED) {
    o->set_schedule(v1::OptimizerConfig::COSINE);
  }
  v1::Fp8Recipe* f = spec.mutable_fp8();
  if (!f->has_delayed() && !f->has_current()) f->mutable_delayed();
  if (f->has_delayed()) {
    if (f->delayed().amax_history_len() == 0) f->mutable_delayed()->set_amax_history_len(16);
    if (f->delayed().amax_compute() == v1::DelayedScaling::AMAX_COMPUTE_UNSPECIFIED) {
      f->mutable_delayed()->set_amax_compute(v1::DelayedScaling::MAX);
    }
  }
  if (spec.device_kind() == v1::DEVICE_KIND_UNSPECIFIED) spec.set_device_kind(v1::CPU);
  if (spec.data().has_synthetic() && spec.data().synthetic().max_digits() == 0) {
    spec.mutable_data()->mutable_synthetic()->set_max_digits(
        spec.data().synthetic().task() == v1::SyntheticData::COPY ? 8 : 3);
  }
  if (spec.step_timeout_s() == 0) spec.set_step_timeout_s(kDefaultStepTimeoutSeconds);
  spec.set_priority(EffectiveJobPriority(spec));
  if (spec.loss_chunk_tokens() == 0) {
    // As many tokens as keep one chunk of bf16 logits within 256 MiB.
    constexpr int64_t kLogitBudgetElements = (int64_t{256} << 20) / 2;
    const int64_t vocab = std::max<int64_t>(1, spec.model().vocab_size());
    spec.set_loss_chunk_tokens(static_cast<int32_t>(
        std::clamp<int64_t>(kLogitBudgetElements / vocab, 1, kMaxTokensPerMicroBatch)));
  }
  return spec;
}

}  // namespace tessera
