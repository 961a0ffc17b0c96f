// CheckpointSpecHash and the shaping spec it digests (see spec_hash.h).
#include "formats/spec_hash.h"

#include "common/sha256.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace tessera {
namespace {

std::string HashOf(const v1::JobSpec& shaping) {
  return Sha256Hex(DeterministicBytes(shaping));
}

}  // namespace

std::string DeterministicBytes(const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return bytes;
}

v1::JobSpec CheckpointShapingSpec(const v1::JobSpec& spec) {
  v1::JobSpec shaping;
  *shaping.mutable_model() = spec.model();
  shaping.mutable_model()->clear_init_from();
  *shaping.mutable_optimizer() = spec.optimizer();
  *shaping.mutable_data() = spec.data();
  shaping.set_seed(spec.seed());
  return shaping;
}

std::string CheckpointSpecHash(const v1::JobSpec& spec) {
  return HashOf(CheckpointShapingSpec(spec));
}

std::string LegacyCheckpointSpecHash(const v1::JobSpec& spec) {
  v1::JobSpec shaping = CheckpointShapingSpec(spec);
  *shaping.mutable_fp8() = spec.fp8();
  // Fields added after version 1, which change no state.
  shaping.mutable_fp8()->clear_stats_interval_steps();
  shaping.mutable_fp8()->clear_saturation_warn_fraction();
  shaping.mutable_fp8()->clear_underflow_warn_fraction();
  // The shadow loss came later and shapes no state: version 1 hashes never
  // covered it.
  shaping.mutable_fp8()->clear_shadow_interval_steps();
  shaping.mutable_fp8()->clear_shadow_gap_warn();
  shaping.mutable_fp8()->clear_shadow_batch_sequences();
  return HashOf(shaping);
}

}  // namespace tessera
