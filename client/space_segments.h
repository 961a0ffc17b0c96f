// Encoding a line one space-separated segment at a time, with the ids of
// segments already seen kept per thread: how `tessera data text` encodes
// faster than the SentencePiece library does a whole line.
//
// Why it gives the same ids: a model trained with whitespace splitting (as
// `data tokenizer train` trains) spells a space as U+2581 and has no piece
// with U+2581 after its first byte. So no piece spans the point just
// before a space: every merge (BPE) or lattice path (unigram) of a line is
// one of its segments' side by side, where a segment runs from one space
// (included) to the next (excluded). Encoding "a b\n" is then encoding "a"
// and " b\n" apart. Natural text repeats its words, so most segments are
// found in the cache and never reach the library, whose per-call cost
// (normalising, building a result message, hashing every candidate pair)
// is what a core spends its time on. A model that breaks the rule keeps
// whole-line encoding (PiecesStayWithinSpaceSegments).
#ifndef TESSERA_CLIENT_SPACE_SEGMENTS_H_
#define TESSERA_CLIENT_SPACE_SEGMENTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace tessera {

// Whether no piece holds U+2581 (a space) after its first byte.
bool PiecesStayWithinSpaceSegments(const std::vector<std::string>& pieces);

// Calls visit(segment) for each segment of `line`: cut before every space
// (0x20), so each segment but the first begins with one.
template <typename Visit>
void ForEachSpaceSegment(absl::string_view line, Visit visit) {
  size_t start = 0;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == ' ') {
      visit(line.substr(start, i - start));
      start = i;
    }
  }
  if (start < line.size()) visit(line.substr(start));
}

// The ids of segments seen before, for one thread. Bounded: segments
// longer than kMaxSegmentBytes are not kept, and the cache empties itself
// when it holds kMaxSegments (the ids never depend on what it holds).
class SegmentIdCache {
 public:
  static constexpr size_t kMaxSegmentBytes = 48;
  static constexpr size_t kMaxSegments = size_t{1} << 19;  // ~40 MB at most

  // Appends the segment's ids and returns true when it is cached.
  bool Append(absl::string_view segment, std::vector<uint32_t>* ids) const {
    const auto it = index_.find(segment);
    if (it == index_.end()) return false;
    ids->insert(ids->end(), ids_.begin() + it->second.first,
                ids_.begin() + it->second.first + it->second.second);
    return true;
  }
  // Keeps a segment's ids (those from `first` to the end of *ids).
  void Keep(absl::string_view segment, const std::vector<uint32_t>& ids, size_t first);
  // Empties the cache for another model (`owner` identifies it).
  void Reset(uint64_t owner);
  uint64_t owner() const { return owner_; }

 private:
  uint64_t owner_ = 0;
  // segment -> (offset into ids_, count)
  absl::flat_hash_map<std::string, std::pair<uint32_t, uint32_t>> index_;
  std::vector<uint32_t> ids_;
};

}  // namespace tessera

#endif  // TESSERA_CLIENT_SPACE_SEGMENTS_H_
