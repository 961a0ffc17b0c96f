// "Did you mean ...?" for an unknown field in a job file: the field of the
// message that the unknown key most likely meant. A lowerCamelCase key that
// names a field in snake_case maps to it; otherwise the field within a small
// edit distance (insertions, deletions, substitutions and swaps of adjacent
// characters) wins, the nearest first, then the earliest in the message.
#ifndef TESSERA_CLIENT_FIELD_SUGGESTION_H_
#define TESSERA_CLIENT_FIELD_SUGGESTION_H_

#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"

namespace tessera {

// The suggested field name, or "" when no field is close enough.
std::string SuggestFieldName(const google::protobuf::Descriptor& message, absl::string_view key);

// Edit distance with adjacent swaps counted as one edit (optimal string
// alignment), for strings of at most 256 bytes; longer ones compare as far
// apart.
int EditDistance(absl::string_view a, absl::string_view b);

}  // namespace tessera

#endif  // TESSERA_CLIENT_FIELD_SUGGESTION_H_
