// The rank state file of a Tessera checkpoint (rank-<R>.state; its layout
// is described in worker/trainer/fsdp_checkpoint.cc, which writes it):
// parsing one file, and reading every parameter whole from a committed
// step, gathered from all ranks' dim-0 shards, for tools that need no
// trainer (the Hugging Face export). Every file is verified against its rank's manifest first
// (checkpoint_io.h), so a damaged one is DATA_LOSS naming it.
#ifndef TESSERA_FORMATS_CHECKPOINT_STATE_H_
#define TESSERA_FORMATS_CHECKPOINT_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

inline constexpr char kStateMagic[] = "TSRSTAT1";

// The compute copy's element type as a state file records it: the value of
// the trainer's DType (worker/ops/tensor.h), which
// worker/trainer/checkpoint_dtype_test holds to these.
inline constexpr int64_t kStateDTypeBFloat16 = 1;  // 2 bytes per element
inline constexpr int64_t kStateDTypeE4M3 = 2;      // 1 byte per element

std::string StateFileName(int rank);

// One parameter shard as a state file holds it (pointers into the file).
struct SavedParam {
  std::string name;
  int64_t rows = 0, cols = 0, dtype = 0, first = 0, n = 0;
  const char* master = nullptr;
  const char* exp_avg = nullptr;
  const char* exp_avg_sq = nullptr;
  const char* compute = nullptr;
};

struct SavedState {
  std::string bytes;  // the whole verified file; the pointers below point into it
  int64_t step = 0, rank = 0, world = 0, data_position = 0;
  std::vector<SavedParam> params;
  const char* meta = nullptr;
  int64_t meta_count = 0;
};

// Parses s.bytes; `what` names the file in errors (DATA_LOSS).
absl::Status ParseState(const std::string& what, SavedState& s);

// One parameter's fp32 master weights, whole: [rows, cols] row-major.
struct FullParameter {
  std::string name;
  int64_t rows = 0, cols = 0;
  std::vector<float> values;
};

// Every parameter of committed step `step` under checkpoint root `dir`, in
// model order. The job `spec` (null: not checked) must be one that may load
// the checkpoint (checkpoint_compatibility.h; its FP8 recipe may differ, the
// masters do not depend on it), so weights are never read under another
// model's names.
// NOT_FOUND when the step is not committed; DATA_LOSS naming the file for a
// damaged or inconsistent one.
absl::StatusOr<std::vector<FullParameter>> ReadFullParameters(const std::string& dir, int step,
                                                              const v1::JobSpec* spec);

}  // namespace tessera

#endif  // TESSERA_FORMATS_CHECKPOINT_STATE_H_
