// Fp8StepStats (see fp8_step_stats.h).
#include "worker/trainer/fp8_step_stats.h"

#include "common/status_macros.h"

namespace tessera {

absl::StatusOr<std::unique_ptr<Fp8StepStats>> Fp8StepStats::Create(Ops& ops, int n_layers) {
  std::unique_ptr<Fp8StepStats> stats(new Fp8StepStats());
  stats->tensors_ = n_layers * kBlockLinears * kRoles;
  const size_t count_bytes = sizeof(int64_t) * 2 * stats->tensors_;
  const size_t value_bytes = sizeof(float) * 2 * stats->tensors_;
  ASSIGN_OR_RETURN(stats->counts_, ops.Allocate(count_bytes));
  ASSIGN_OR_RETURN(stats->values_, ops.Allocate(value_bytes));
  ASSIGN_OR_RETURN(stats->host_counts_, ops.AllocateHost(count_bytes));
  ASSIGN_OR_RETURN(stats->host_values_, ops.AllocateHost(value_bytes));
  stats->elements_.assign(stats->tensors_, 0);
  stats->formats_.assign(stats->tensors_, DType::kE4M3);
  return stats;
}

absl::Status Fp8StepStats::Begin(Ops& ops, Stream* stream) {
  RETURN_IF_ERROR(ops.Memset(counts_->data(), 0, counts_->bytes(), stream));
  return ops.Memset(values_->data(), 0, values_->bytes(), stream);
}

absl::Status Fp8StepStats::Measure(Ops& ops, LinearId id, Role role, const TensorDesc& in,
                                   DType format, const float* scale, Stream* stream) {
  const int i = Index(id, role);
  int64_t* counts = static_cast<int64_t*>(counts_->data()) + 2 * i;
  float* values = static_cast<float*>(values_->data()) + 2 * i;
  elements_[i] = in.NumElements();
  formats_[i] = format;
  if (in.NumElements() == 0) return absl::OkStatus();  // an empty weight shard
  RETURN_IF_ERROR(ops.Amax(in, values, stream));
  RETURN_IF_ERROR(ops.CopyDeviceToDevice(values + 1, scale, sizeof(float), stream));
  return ops.Fp8Stats(in, format, scale, counts, stream);
}

absl::Status Fp8StepStats::CopyToHost(Ops& ops, Stream* stream) {
  RETURN_IF_ERROR(ops.CopyToHost(host_counts_->data(), counts_->data(), counts_->bytes(), stream));
  return ops.CopyToHost(host_values_->data(), values_->data(), values_->bytes(), stream);
}

std::vector<Fp8TensorReport> Fp8StepStats::Read() const {
  const auto* counts = static_cast<const int64_t*>(host_counts_->data());
  const auto* values = static_cast<const float*>(host_values_->data());
  std::vector<Fp8TensorReport> reports;
  reports.reserve(tensors_);
  for (int i = 0; i < tensors_; ++i) {
    Fp8TensorReport r;
    const int linear = i / kRoles;
    r.block = linear / kBlockLinears;
    r.linear = BlockLinearName(static_cast<BlockLinear>(linear % kBlockLinears));
    r.role = static_cast<Role>(i % kRoles);
    r.e5m2 = formats_[i] == DType::kE5M2;
    r.amax = values[2 * i];
    r.scale = values[2 * i + 1];
    r.saturated = counts[2 * i];
    r.underflowed = counts[2 * i + 1];
    r.elements = elements_[i];
    reports.push_back(r);
  }
  return reports;
}

}  // namespace tessera
