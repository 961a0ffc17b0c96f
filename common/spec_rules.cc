// The JobSpec rules that read no file (see spec_rules.h).
#include "common/spec_rules.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/data_mixture.h"
#include "common/job_priority.h"
#include "common/spec_limits.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/unknown_field_set.h"

namespace tessera {
namespace {

constexpr int kMaxKeepLast = 1'000'000;
// Each evaluation scores eval_batches micro-batches per rank; more than
// this would take longer than most trainings between two evaluations.
constexpr int kMaxEvalBatches = 100'000;

absl::Status Bad(const std::string& field, const std::string& reason) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", reason));
}

absl::Status AtLeast(const std::string& field, int64_t value, int64_t min) {
  if (value < min) {
    return Bad(field, absl::StrCat("must be >= ", min, " (got ", value, ")"));
  }
  return absl::OkStatus();
}

bool Finite(float v) { return std::isfinite(v); }

// Protobuf keeps fields it does not know (a client built from a newer
// job.proto, or a hand-made message) as unknown fields and otherwise ignores
// them; a job must never silently drop a setting, so they are refused.
absl::Status CheckNoUnknownFields(const google::protobuf::Message& message,
                                  const std::string& path) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = reflection->GetUnknownFields(message);
  if (!unknown.empty()) {
    return Bad(path.empty() ? std::string(message.GetDescriptor()->name()) : path,
               absl::StrCat("unknown field number ", unknown.field(0).number(),
                            " (not in this coordinator's job.proto; is the client newer?)"));
  }
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const std::string child = path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        RETURN_IF_ERROR(CheckNoUnknownFields(reflection->GetRepeatedMessage(message, field, i),
                                             absl::StrCat(child, "[", i, "]")));
      }
      continue;
    }
    RETURN_IF_ERROR(CheckNoUnknownFields(reflection->GetMessage(message, field), child));
  }
  return absl::OkStatus();
}

absl::Status ValidateModel(const v1::ModelConfig& m) {
  RETURN_IF_ERROR(AtLeast("model.vocab_size", m.vocab_size(), 2));
  RETURN_IF_ERROR(AtLeast("model.d_model", m.d_model(), 1));
  RETURN_IF_ERROR(AtLeast("model.n_layers", m.n_layers(), 1));
  RETURN_IF_ERROR(AtLeast("model.n_heads", m.n_heads(), 1));
  RETURN_IF_ERROR(AtLeast("model.ffn_dim", m.ffn_dim(), 1));
  RETURN_IF_ERROR(AtLeast("model.seq_len", m.seq_len(), 2));
  if (m.d_model() % m.n_heads() != 0) {
    return Bad("model.d_model", absl::StrCat("must be divisible by model.n_heads (got ",
                                             m.d_model(), " and ", m.n_heads(), ")"));
  }
  if ((m.d_model() / m.n_heads()) % 2 != 0) {
    return Bad("model.n_heads", absl::StrCat("head dim d_model/n_heads must be even for RoPE (got ",
                                             m.d_model() / m.n_heads(), ")"));
  }
  if (m.n_kv_heads() < 0) {
    return Bad("model.n_kv_heads",
               absl::StrCat("must be >= 0 (0 means model.n_heads), got ", m.n_kv_heads()));
  }
  if (m.n_kv_heads() > 0 && m.n_heads() % m.n_kv_heads() != 0) {
    return Bad("model.n_kv_heads",
               absl::StrCat("must divide model.n_heads: each key/value head serves a whole group "
                            "of query heads (got ", m.n_kv_heads(), " and ", m.n_heads(), ")"));
  }
  if (!Finite(m.norm_eps()) || m.norm_eps() < 0) {
    return Bad("model.norm_eps", "must be a finite value >= 0 (0 means 1e-5)");
  }
  if (!Finite(m.rope_theta()) || m.rope_theta() < 0) {
    return Bad("model.rope_theta", "must be a finite value >= 0 (0 means 10000)");
  }
  return absl::OkStatus();
}

// What the device kind's engine supports beyond the model's own rules; run
// after ValidateModel. The CUDA engine's attention kernels are written for
// head dims 64 and 128 only.
absl::Status ValidateForDevice(const v1::ModelConfig& m, v1::DeviceKind kind) {
  const int head_dim = m.d_model() / m.n_heads();
  if (kind == v1::CUDA && head_dim != 64 && head_dim != 128) {
    return Bad("model.n_heads",
               absl::StrCat("CUDA jobs need a head dim d_model/n_heads of 64 or 128, the sizes the "
                            "CUDA engine's tensor-core attention kernels support (got ",
                            m.d_model(), "/", m.n_heads(), " = ", head_dim, ")"));
  }
  return absl::OkStatus();
}

// A list of data sources: count and paths (lengths are spec_limits'), and,
// for training, the weights by the rule the workers sample with.
absl::Status ValidateSources(const std::string& field,
                             const google::protobuf::RepeatedPtrField<v1::DataSource>& sources,
                             bool weighted) {
  if (sources.size() > kMaxDataSources) {
    return Bad(field, absl::StrCat("at most ", kMaxDataSources, " sources (got ", sources.size(),
                                   ")"));
  }
  std::vector<double> weights;
  for (int i = 0; i < sources.size(); ++i) {
    const std::string at = absl::StrCat(field, "[", i, "]");
    if (sources[i].path().empty()) return Bad(at + ".path", "must be a non-empty path");
    if (static_cast<int64_t>(sources[i].path().size()) > kMaxPathBytes) {
      return Bad(at + ".path", absl::StrCat("must be at most ", kMaxPathBytes, " bytes (got ",
                                            sources[i].path().size(), ")"));
    }
    for (int j = 0; j < i; ++j) {
      if (sources[j].path() == sources[i].path()) {
        return Bad(at + ".path", absl::StrCat("repeats ", field, "[", j,
                                              "].path; give one source a larger weight instead"));
      }
    }
    weights.push_back(sources[i].weight());
  }
  if (weighted) {
    absl::StatusOr<std::vector<int64_t>> quotas = MixtureQuotas(weights, field);
    if (!quotas.ok()) return quotas.status();
  }
  return absl::OkStatus();
}

// data.validation: held-out data scored every eval_interval_steps steps.
absl::Status ValidateValidation(const v1::DataConfig& d) {
  if (!d.has_validation()) return absl::OkStatus();
  const v1::ValidationConfig& v = d.validation();
  if (!v.sources().empty()) {
    if (!v.token_file().empty()) {
      return Bad("data.validation",
                 "set either data.validation.token_file or data.validation.sources, not both");
    }
    RETURN_IF_ERROR(ValidateSources("data.validation.sources", v.sources(), /*weighted=*/false));
  } else if (v.token_file().empty()) {
    return Bad("data.validation.token_file",
               "must be a non-empty path when data.validation is set (or give "
               "data.validation.sources)");
  }
  if (static_cast<int64_t>(v.token_file().size()) > kMaxPathBytes) {
    return Bad("data.validation.token_file",
               absl::StrCat("must be at most ", kMaxPathBytes, " bytes (got ",
                            v.token_file().size(), ")"));
  }
  if (v.eval_interval_steps() < 1 || v.eval_interval_steps() > kMaxSteps) {
    return Bad("data.validation.eval_interval_steps",
               absl::StrCat("must be in [1, ", kMaxSteps, "] (got ", v.eval_interval_steps(), ")"));
  }
  if (v.eval_batches() < 1 || v.eval_batches() > kMaxEvalBatches) {
    return Bad("data.validation.eval_batches",
               absl::StrCat("must be in [1, ", kMaxEvalBatches, "] micro-batches per rank (got ",
                            v.eval_batches(), ")"));
  }
  return absl::OkStatus();
}

absl::Status ValidateData(const v1::DataConfig& d) {
  if (d.document_masking() && d.source_case() == v1::DataConfig::kSynthetic) {
    return Bad("data.document_masking",
               "needs token-file data with document starts (data.token_file or data.sources); "
               "data.synthetic has no documents");
  }
  if (!d.sources().empty()) {
    if (d.source_case() != v1::DataConfig::SOURCE_NOT_SET) {
      return Bad("data", absl::StrCat("set exactly one of data.token_file, data.synthetic and "
                                      "data.sources (got data.sources and data.",
                                      d.source_case() == v1::DataConfig::kTokenFile
                                          ? "token_file"
                                          : "synthetic",
                                      ")"));
    }
    RETURN_IF_ERROR(ValidateSources("data.sources", d.sources(), /*weighted=*/true));
    RETURN_IF_ERROR(AtLeast("data.micro_batch_size", d.micro_batch_size(), 1));
    return ValidateValidation(d);
  }
  switch (d.source_case()) {
    case v1::DataConfig::kTokenFile:
      if (d.token_file().empty()) return Bad("data.token_file", "must be a non-empty path");
      break;
    case v1::DataConfig::kSynthetic:
      if (d.synthetic().task() == v1::SyntheticData::TASK_UNSPECIFIED) {
        return Bad("data.synthetic.task", "must be ADDITION or COPY");
      }
      if (d.synthetic().num_tokens() < 0) {
        return Bad("data.synthetic.num_tokens", "must be >= 0");
      }
      if (d.synthetic().max_digits() < 0 || d.synthetic().max_digits() > 18) {
        return Bad("data.synthetic.max_digits", "must be in [0, 18]");
      }
      break;
    case v1::DataConfig::SOURCE_NOT_SET:
      return Bad("data", "set one of data.token_file, data.synthetic and data.sources");
  }
  RETURN_IF_ERROR(AtLeast("data.micro_batch_size", d.micro_batch_size(), 1));
  return ValidateValidation(d);
}

absl::Status ValidateOptimizer(const v1::OptimizerConfig& o) {
  if (!Finite(o.lr()) || o.lr() <= 0) return Bad("optimizer.lr", "must be > 0");
  if (!Finite(o.beta1()) || o.beta1() < 0 || o.beta1() >= 1) {
    return Bad("optimizer.beta1", "must be in [0, 1)");
  }
  if (!Finite(o.beta2()) || o.beta2() < 0 || o.beta2() >= 1) {
    return Bad("optimizer.beta2", "must be in [0, 1)");
  }
  if (!Finite(o.eps()) || o.eps() < 0) return Bad("optimizer.eps", "must be >= 0");
  if (!Finite(o.weight_decay()) || o.weight_decay() < 0) {
    return Bad("optimizer.weight_decay", "must be >= 0");
  }
  RETURN_IF_ERROR(AtLeast("optimizer.warmup_steps", o.warmup_steps(), 0));
  if (!Finite(o.min_lr()) || o.min_lr() < 0 || o.min_lr() > o.lr()) {
    return Bad("optimizer.min_lr", absl::StrCat("must be in [0, optimizer.lr] (got ", o.min_lr(), ")"));
  }
  if (!Finite(o.grad_clip_norm()) || o.grad_clip_norm() < 0) {
    return Bad("optimizer.grad_clip_norm", "must be >= 0 (0 disables clipping)");
  }
  return absl::OkStatus();
}

// The FP8 statistics settings (README "Watching FP8").
absl::Status ValidateFp8Stats(const v1::Fp8Recipe& f) {
  constexpr int kMaxStatsInterval = 1000000;
  if (f.stats_interval_steps() < 0 || f.stats_interval_steps() > kMaxStatsInterval) {
    return Bad("fp8.stats_interval_steps",
               absl::StrCat("must be in [0, ", kMaxStatsInterval, "] (0 turns statistics off), got ",
                            f.stats_interval_steps()));
  }
  if (f.stats_interval_steps() > 0 && f.disabled()) {
    return Bad("fp8.stats_interval_steps",
               "must be 0 when fp8.disabled is true: there are no FP8 tensors to measure");
  }
  const std::pair<const char*, double> fractions[] = {
      {"fp8.saturation_warn_fraction", f.saturation_warn_fraction()},
      {"fp8.underflow_warn_fraction", f.underflow_warn_fraction()}};
  for (const auto& [field, fraction] : fractions) {
    // Written so that NaN fails too.
    if (!(fraction >= 0.0 && fraction <= 1.0)) {
      return Bad(field, absl::StrCat("must be a fraction in [0, 1] (0 means the default), got ",
                                     fraction));
    }
  }
  return absl::OkStatus();
}

// micro_batch_size: data.micro_batch_size, the most sequences the shadow
// can take from a rank's held-out micro-batch.
absl::Status ValidateFp8(const v1::Fp8Recipe& f, int micro_batch_size) {
  if (f.has_delayed()) {
    if (f.delayed().amax_history_len() < 0 || f.delayed().amax_history_len() > 1024) {
      return Bad("fp8.delayed.amax_history_len", "must be in [0, 1024] (0 means 16)");
    }
    if (f.delayed().margin() < 0 || f.delayed().margin() > 32) {
      return Bad("fp8.delayed.margin", "must be in [0, 32]");
    }
  }
  if (f.has_current() && (f.current().margin() < 0 || f.current().margin() > 32)) {
    return Bad("fp8.current.margin", "must be in [0, 32]");
  }
  if (f.shadow_interval_steps() < 0 || f.shadow_interval_steps() > kMaxSteps) {
    return Bad("fp8.shadow_interval_steps",
               absl::StrCat("must be in [0, ", kMaxSteps, "] (0 turns the shadow loss off), got ",
                            f.shadow_interval_steps()));
  }
  if (f.shadow_interval_steps() > 0 && f.disabled()) {
    return Bad("fp8.shadow_interval_steps",
               "needs FP8: with fp8.disabled the job already runs in bf16, so there is no FP8 "
               "loss to compare with its bf16 shadow");
  }
  if (!Finite(f.shadow_gap_warn()) || f.shadow_gap_warn() < 0 ||
      f.shadow_gap_warn() > kMaxShadowGapWarn) {
    return Bad("fp8.shadow_gap_warn",
               absl::StrCat("must be in [0, ", kMaxShadowGapWarn, "] nats (0 means ",
                            kDefaultShadowGapWarn, "), got ", f.shadow_gap_warn()));
  }
  if (f.shadow_gap_warn() > 0 && f.shadow_interval_steps() == 0) {
    return Bad("fp8.shadow_gap_warn", "is set but fp8.shadow_interval_steps is 0 (the shadow "
               "loss is off, so nothing would be compared with it)");
  }
  if (f.shadow_batch_sequences() < 0 || f.shadow_batch_sequences() > micro_batch_size) {
    return Bad("fp8.shadow_batch_sequences",
               absl::StrCat("must be in [0, data.micro_batch_size ", micro_batch_size,
                            "] (the shadow runs that many sequences of each rank's held-out "
                            "micro-batch; 0 means ", kDefaultShadowBatchSequences, "), got ",
                            f.shadow_batch_sequences()));
  }
  if (f.shadow_batch_sequences() > 0 && f.shadow_interval_steps() == 0) {
    return Bad("fp8.shadow_batch_sequences", "is set but fp8.shadow_interval_steps is 0 (the "
               "shadow loss is off, so no sequence would be run)");
  }
  return ValidateFp8Stats(f);
}

// keep_last and resume_from; interval_steps is checked with the steps.
absl::Status ValidateCheckpoint(const v1::CheckpointConfig& c, int steps) {
  if (!c.dir().empty()) {
    RETURN_IF_ERROR(ValidateCheckpointRoot(c.dir()));
  }
  if (c.keep_last() < 0 || c.keep_last() > kMaxKeepLast) {
    return Bad("checkpoint.keep_last",
               absl::StrCat("must be in [0, ", kMaxKeepLast, "] (0 keeps every checkpoint), got ",
                            c.keep_last()));
  }
  if (c.keep_last() > 0 && c.dir().empty()) {
    return Bad("checkpoint.dir", "must be set when checkpoint.keep_last > 0");
  }
  const std::string& from = c.resume_from();
  if (from.empty()) return absl::OkStatus();
  if (c.dir().empty()) return Bad("checkpoint.dir", "must be set when checkpoint.resume_from is");
  if (from == "latest") return absl::OkStatus();
  // A canonical decimal step: digits only, no sign, no leading zero.
  const bool digits = from.size() <= 8 && from[0] != '0' &&
                      std::all_of(from.begin(), from.end(), [](char ch) {
                        return ch >= '0' && ch <= '9';
                      });
  if (!digits) {
    return Bad("checkpoint.resume_from",
               absl::StrCat("must be \"latest\" or a step number (got \"",
                            from.substr(0, 64), "\")"));
  }
  const int step = std::stoi(from);
  if (step >= steps) {
    return Bad("checkpoint.resume_from",
               absl::StrCat("step ", step, " must be before steps (", steps,
                            "); nothing would be left to run"));
  }
  return absl::OkStatus();
}

absl::Status ValidateMemory(const v1::MemoryConfig& m, int n_layers) {
  if (!v1::MemoryConfig::Recompute_IsValid(m.recompute())) {
    return Bad("memory.recompute",
               absl::StrCat("unknown policy ", m.recompute(), " (NONE, BLOCKS or SELECTIVE)"));
  }
  if (m.every_n_blocks() < 0 || m.every_n_blocks() > std::max(n_layers, 1)) {
    return Bad("memory.every_n_blocks",
               absl::StrCat("must be in [0, model.n_layers = ", n_layers,
                            "] (0 means every block), got ", m.every_n_blocks()));
  }
  return absl::OkStatus();
}

absl::Status ValidateAttentionKernels(const v1::JobSpec& spec) {
  if (!v1::AttentionKernels_IsValid(spec.attention_kernels())) {
    return Bad("attention_kernels", absl::StrCat("unknown kernels ", spec.attention_kernels(),
                                                 " (ATTENTION_KERNELS_AUTO, _TESSERA or _CUDNN)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpecFields(const v1::JobSpec& spec) {
  RETURN_IF_ERROR(CheckNoUnknownFields(spec, ""));
  // Upper bounds first: the rules below may multiply fields.
  RETURN_IF_ERROR(CheckSpecLimits(spec));
  if (!spec.has_model()) return Bad("model", "is required");
  if (static_cast<int64_t>(spec.model().init_from().size()) > kMaxPathBytes) {
    return Bad("model.init_from", absl::StrCat("must be at most ", kMaxPathBytes, " bytes (got ",
                                               spec.model().init_from().size(), ")"));
  }
  RETURN_IF_ERROR(ValidateModel(spec.model()));
  if (!spec.has_data()) return Bad("data", "is required");
  RETURN_IF_ERROR(ValidateData(spec.data()));
  if (!spec.has_optimizer()) return Bad("optimizer", "is required (at least optimizer.lr)");
  RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer()));
  RETURN_IF_ERROR(ValidateFp8(spec.fp8(), spec.data().micro_batch_size()));
  if (spec.world_size() < 1 || spec.world_size() > kMaxWorldSize) {
    return Bad("world_size", absl::StrCat("must be in [1, ", kMaxWorldSize, "] (got ",
                                          spec.world_size(), ")"));
  }
  if (const int group = spec.parallelism().shard_group_size();
      group < 0 || group > spec.world_size() || (group > 0 && spec.world_size() % group != 0)) {
    return Bad("parallelism.shard_group_size",
               absl::StrCat("must be 0 (plain FSDP) or divide world_size ", spec.world_size(),
                            " (got ", group, ")"));
  }
  if (!v1::DeviceKind_IsValid(spec.device_kind())) return Bad("device_kind", "unknown kind");
  RETURN_IF_ERROR(ValidateForDevice(spec.model(), spec.device_kind()));
  RETURN_IF_ERROR(AtLeast("steps", spec.steps(), 1));
  RETURN_IF_ERROR(AtLeast("checkpoint.interval_steps", spec.checkpoint().interval_steps(), 0));
  if (spec.checkpoint().interval_steps() > 0 && spec.checkpoint().dir().empty()) {
    return Bad("checkpoint.dir", "must be set when checkpoint.interval_steps > 0");
  }
  RETURN_IF_ERROR(ValidateCheckpoint(spec.checkpoint(), spec.steps()));
  RETURN_IF_ERROR(AtLeast("step_timeout_s", spec.step_timeout_s(), 0));
  RETURN_IF_ERROR(AtLeast("max_restarts", spec.max_restarts(), 0));
  RETURN_IF_ERROR(ValidateMemory(spec.memory(), spec.model().n_layers()));
  RETURN_IF_ERROR(ValidateAttentionKernels(spec));
  RETURN_IF_ERROR(CheckJobPriority(spec));
  return AtLeast("loss_chunk_tokens", spec.loss_chunk_tokens(), 0);
}

}  // namespace tessera
