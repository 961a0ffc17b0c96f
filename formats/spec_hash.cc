// CheckpointSpecHash (see spec_hash.h).
#include "formats/spec_hash.h"

#include "common/sha256.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace tessera {

std::string CheckpointSpecHash(const v1::JobSpec& spec) {
  v1::JobSpec shaping;
  *shaping.mutable_model() = spec.model();
  shaping.mutable_model()->clear_init_from();
  *shaping.mutable_optimizer() = spec.optimizer();
  *shaping.mutable_fp8() = spec.fp8();
  *shaping.mutable_data() = spec.data();
  shaping.set_seed(spec.seed());
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    shaping.SerializeToCodedStream(&coded);
  }
  return Sha256Hex(bytes);
}

}  // namespace tessera
