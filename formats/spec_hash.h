// The spec hash a checkpoint records: a stable digest of the JobSpec fields
// that shape a rank's saved state, so a checkpoint is only loaded into a job
// whose state it can be. Covered: model (every shape, norm_eps, rope_theta),
// optimizer (lr, betas, eps, weight decay, schedule, warmup, min_lr,
// clipping), data (source, synthetic task or token file path,
// micro_batch_size) and seed. Not covered, because a resumed job may change
// them without making the saved state wrong: name, world_size (checked
// separately, and resharding is allowed), fp8 (the checkpoint records the
// recipe it was written under beside the hash, and a resumed job that
// changes it re-derives its compute weights from the masters:
// formats/checkpoint_compatibility.h), model.init_from (only step 0's
// weights come from it), device_kind, steps (a resumed job may train longer;
// note the decaying LR schedules depend on it), checkpoint, reshard_after_forward,
// loss_chunk_tokens, step_timeout_s, disable_step_graph,
// nondeterministic_gemm_tuning (how GEMM algorithms are chosen, which
// changes no saved shape) and memory (what a step recomputes, which
// changes no saved bit).
//
// The digest is SHA-256 of the deterministic protobuf wire encoding of a
// JobSpec that holds only the covered fields. proto3 does not encode fields
// left at zero, so adding a field to job.proto later leaves the hashes of
// specs that do not set it unchanged.
//
// Checkpoints written before the FP8 recipe could change on resume (rank
// manifest version 1) recorded a hash that also covered fp8:
// LegacyCheckpointSpecHash computes it, so they still resume under the
// recipe they were written with.
#ifndef TESSERA_FORMATS_SPEC_HASH_H_
#define TESSERA_FORMATS_SPEC_HASH_H_

#include <string>

#include "google/protobuf/message_lite.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {

// The covered fields of `spec`, and nothing else (what the hash digests).
v1::JobSpec CheckpointShapingSpec(const v1::JobSpec& spec);

// 64 lowercase hex characters.
std::string CheckpointSpecHash(const v1::JobSpec& spec);

// The hash of the covered fields plus fp8 (version 1 manifests).
std::string LegacyCheckpointSpecHash(const v1::JobSpec& spec);

// The deterministic wire encoding of `message` (the bytes that are hashed,
// and that a manifest records).
std::string DeterministicBytes(const google::protobuf::MessageLite& message);

}  // namespace tessera

#endif  // TESSERA_FORMATS_SPEC_HASH_H_
