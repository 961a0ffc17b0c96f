// Suggestions name the field a misspelt or camelCase key meant, and stay
// silent when nothing is close; the edit distance counts an adjacent swap
// as one edit.
#include "client/field_suggestion.h"

#include "gtest/gtest.h"
#include "proto/tessera/v1/job.pb.h"

namespace tessera {
namespace {

TEST(FieldSuggestion, NamesTheFieldAKeyMeant) {
  const auto& model = *v1::ModelConfig::descriptor();
  EXPECT_EQ(SuggestFieldName(model, "n_head"), "n_heads");
  EXPECT_EQ(SuggestFieldName(model, "d_modle"), "d_model");
  EXPECT_EQ(SuggestFieldName(model, "dModel"), "d_model");
  EXPECT_EQ(SuggestFieldName(model, "nKvHeads"), "n_kv_heads");
  EXPECT_EQ(SuggestFieldName(model, "vocabsize"), "vocab_size");
  const auto& spec = *v1::JobSpec::descriptor();
  EXPECT_EQ(SuggestFieldName(spec, "stepz"), "steps");
  EXPECT_EQ(SuggestFieldName(spec, "world-size"), "world_size");
}

TEST(FieldSuggestion, SilentWhenNothingIsClose) {
  const auto& model = *v1::ModelConfig::descriptor();
  EXPECT_EQ(SuggestFieldName(model, "dropout"), "");
  EXPECT_EQ(SuggestFieldName(model, "x"), "");
  EXPECT_EQ(SuggestFieldName(model, ""), "");
  EXPECT_EQ(SuggestFieldName(model, std::string(100000, 'n')), "");
}

TEST(FieldSuggestion, EditDistance) {
  EXPECT_EQ(EditDistance("", ""), 0);
  EXPECT_EQ(EditDistance("abc", "abc"), 0);
  EXPECT_EQ(EditDistance("abc", ""), 3);
  EXPECT_EQ(EditDistance("abc", "abd"), 1);
  EXPECT_EQ(EditDistance("abc", "acb"), 1);  // one swap
  EXPECT_EQ(EditDistance("abc", "abcd"), 1);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_GT(EditDistance(std::string(300, 'a'), "a"), 1000);
}

}  // namespace
}  // namespace tessera
