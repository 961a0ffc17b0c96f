// Space segments and their id cache (see space_segments.h).
#include "client/space_segments.h"

namespace tessera {

bool PiecesStayWithinSpaceSegments(const std::vector<std::string>& pieces) {
  constexpr absl::string_view kSpaceMark = "\xe2\x96\x81";  // U+2581
  for (absl::string_view piece : pieces) {
    if (piece.size() > kSpaceMark.size() &&
        piece.find(kSpaceMark, 1) != absl::string_view::npos) {
      return false;
    }
  }
  return true;
}

void SegmentIdCache::Keep(absl::string_view segment, const std::vector<uint32_t>& ids,
                          size_t first) {
  if (segment.size() > kMaxSegmentBytes) return;
  if (index_.size() >= kMaxSegments || ids_.size() > (size_t{1} << 31)) {
    index_.clear();
    ids_.clear();
  }
  const uint32_t offset = static_cast<uint32_t>(ids_.size());
  ids_.insert(ids_.end(), ids.begin() + first, ids.end());
  index_.emplace(std::string(segment),
                 std::make_pair(offset, static_cast<uint32_t>(ids.size() - first)));
}

void SegmentIdCache::Reset(uint64_t owner) {
  owner_ = owner;
  index_.clear();
  ids_.clear();
}

}  // namespace tessera
