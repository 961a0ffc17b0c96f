// Field-name suggestions for job files (see field_suggestion.h).
#include "client/field_suggestion.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace tessera {
namespace {

constexpr size_t kMaxCompared = 256;

std::string SnakeCase(absl::string_view key) {
  std::string out;
  for (char c : key) {
    if (std::isupper(static_cast<unsigned char>(c))) {
      out += '_';
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

int EditDistance(absl::string_view a, absl::string_view b) {
  if (a.size() > kMaxCompared || b.size() > kMaxCompared) return 1 << 20;
  const size_t n = a.size(), m = b.size();
  // Three rows: the previous two and the current one.
  std::vector<int> before(m + 1), prev(m + 1), cur(m + 1);
  for (size_t j = 0; j <= m; ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        cur[j] = std::min(cur[j], before[j - 2] + 1);
      }
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

std::string SuggestFieldName(const google::protobuf::Descriptor& message, absl::string_view key) {
  const std::string snake = SnakeCase(key);
  if (snake != key && message.FindFieldByName(snake) != nullptr) return snake;
  // At most two edits, and fewer than the key's length, so that a one- or
  // two-letter key is not "corrected" into an unrelated field.
  const int allowed = std::min<int>(2, static_cast<int>(key.size()) - 1);
  std::string best;
  int best_distance = allowed + 1;
  for (int i = 0; i < message.field_count(); ++i) {
    const std::string& name = message.field(i)->name();
    const int d = EditDistance(snake, name);
    if (d < best_distance) {
      best_distance = d;
      best = name;
    }
  }
  return best;
}

}  // namespace tessera
