// Submit-time memory admission (see memory_admission.h).
#include "server/memory_admission.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/memory_estimate.h"
#include "common/parallelism.h"

namespace tessera {

absl::Status CheckJobFitsRegisteredWorkers(const v1::JobSpec& spec,
                                           const std::vector<v1::WorkerRecord>& workers) {
  const v1::WorkerRecord* largest = nullptr;
  for (const v1::WorkerRecord& w : workers) {
    if (!w.healthy() || w.device().kind() != spec.device_kind()) continue;
    if (w.device().memory_bytes() <= 0) return absl::OkStatus();  // size unknown: cannot judge
    if (largest == nullptr || w.device().memory_bytes() > largest->device().memory_bytes()) {
      largest = &w;
    }
  }
  if (largest == nullptr) return absl::OkStatus();  // none registered yet

  // Every rank of a shard group holds equally padded shards, so rank 0
  // needs as much as any.
  const int shard_world = ShardGroupSize(spec);
  const RankMemoryEstimate need = EstimateRankMemory(spec, 0, shard_world);
  const int64_t available = largest->device().memory_bytes();
  if (need.total() <= available) return absl::OkStatus();
  const std::string kind = v1::DeviceKind_Name(spec.device_kind());
  return absl::ResourceExhaustedError(absl::StrCat(
      "model: does not fit the registered ", kind, " workers: each rank needs about ",
      need.ToString(), " (", need.total(), " bytes) at ", shard_world,
      shard_world == 1 ? " rank" : " ranks", " per shard group, but the largest ", kind,
      " worker (", largest->worker_id(), ") has ", FormatBytesAsGiB(available), " (", available,
      " bytes); use more workers (world_size), a smaller micro_batch_size or seq_len, or a "
      "smaller model"));
}

}  // namespace tessera
