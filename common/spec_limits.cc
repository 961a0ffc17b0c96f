// JobSpec upper bounds (see spec_limits.h).
#include "common/spec_limits.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

absl::Status AtMost(absl::string_view field, int64_t value, int64_t max) {
  if (value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": must be <= ", max, " (got ", value, ")"));
}

absl::Status CheckSourceLimits(const std::string& field,
                               const google::protobuf::RepeatedPtrField<v1::DataSource>& sources) {
  if (sources.size() > kMaxDataSources) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": at most ", kMaxDataSources,
                                                   " sources (got ", sources.size(), ")"));
  }
  for (int i = 0; i < sources.size(); ++i) {
    RETURN_IF_ERROR(CheckStringLimit(absl::StrCat(field, "[", i, "].path"), sources[i].path(),
                                     kMaxPathBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckStringLimit(absl::string_view field, absl::string_view value, int64_t max_bytes) {
  if (static_cast<int64_t>(value.size()) <= max_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": must be at most ", max_bytes, " bytes (got ", value.size(), ")"));
}

absl::Status CheckSpecLimits(const v1::JobSpec& spec) {
  const v1::ModelConfig& m = spec.model();
  const v1::DataConfig& d = spec.data();
  const absl::Status checks[] = {
      CheckStringLimit("name", spec.name(), kMaxJobNameBytes),
      CheckStringLimit("data.token_file", d.token_file(), kMaxPathBytes),
      CheckStringLimit("checkpoint.dir", spec.checkpoint().dir(), kMaxPathBytes),
      AtMost("model.vocab_size", m.vocab_size(), kMaxVocabSize),
      AtMost("model.d_model", m.d_model(), kMaxDModel),
      AtMost("model.n_layers", m.n_layers(), kMaxLayers),
      AtMost("model.n_heads", m.n_heads(), kMaxHeads),
      AtMost("model.n_kv_heads", m.n_kv_heads(), kMaxHeads),
      AtMost("model.ffn_dim", m.ffn_dim(), kMaxFfnDim),
      AtMost("model.seq_len", m.seq_len(), kMaxSeqLen),
      AtMost("data.synthetic.num_tokens", d.synthetic().num_tokens(), kMaxSyntheticTokens),
      AtMost("data.micro_batch_size", d.micro_batch_size(), kMaxTokensPerMicroBatch),
      AtMost("steps", spec.steps(), kMaxSteps),
      AtMost("optimizer.warmup_steps", spec.optimizer().warmup_steps(), kMaxSteps),
      AtMost("checkpoint.interval_steps", spec.checkpoint().interval_steps(), kMaxSteps),
      AtMost("loss_chunk_tokens", spec.loss_chunk_tokens(), kMaxTokensPerMicroBatch),
      AtMost("step_timeout_s", spec.step_timeout_s(), kMaxStepTimeoutSeconds),
      AtMost("max_restarts", spec.max_restarts(), kMaxRestarts),
  };
  for (const absl::Status& s : checks) {
    if (!s.ok()) return s;
  }
  RETURN_IF_ERROR(CheckSourceLimits("data.sources", d.sources()));
  RETURN_IF_ERROR(CheckSourceLimits("data.validation.sources", d.validation().sources()));
  // Both factors are bounded above, so the product fits in int64.
  const int64_t tokens = int64_t{d.micro_batch_size()} * m.seq_len();
  if (tokens > kMaxTokensPerMicroBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.micro_batch_size: micro_batch_size x model.seq_len must be <= ",
                     kMaxTokensPerMicroBatch, " tokens per rank per step (got ",
                     d.micro_batch_size(), " x ", m.seq_len(), " = ", tokens, ")"));
  }
  return absl::OkStatus();
}

}  // namespace tessera
