// data.document_masking in every batch source: the training token file,
// training sources, the validation token file and validation sources.
// Each test file's token i has id i, so a sequence's first input tells
// where it was read, and each read is checked against the file's document
// index: the inputs and the targets that are not ignored are exactly those
// read without masking (the data order does not change), doc_starts is
// each input's document start within the sequence, and exactly the
// targets that begin a document are ignored. Data without an index, and
// synthetic data, are refused naming data.document_masking and the file.
#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "formats/token_file.h"
#include "gtest/gtest.h"
#include "worker/data/batch_source.h"
#include "worker/data/validation_batch_source.h"

namespace tessera {
namespace {

constexpr int kSeqLen = 16;
constexpr int kMicroBatch = 3;
constexpr int64_t kTokens = 4000;

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

// Token i is id i; documents of random lengths 1..40, so some sequences
// hold several and some boundaries fall on a sequence's edges.
std::vector<uint64_t> WriteDocumentFile(const std::string& path, bool with_index) {
  std::mt19937 rng(std::random_device{}());
  std::vector<uint32_t> tokens(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) tokens[i] = static_cast<uint32_t>(i);
  std::vector<uint64_t> starts;
  for (uint64_t at = 0; at < kTokens; at += 1 + rng() % 40) starts.push_back(at);
  const absl::Status written =
      with_index ? WriteTokenFile(path, tokens, {}, absl::MakeConstSpan(starts))
                 : WriteTokenFile(path, tokens);
  EXPECT_TRUE(written.ok()) << written;
  return starts;
}

v1::JobSpec BaseSpec(bool masking) {
  v1::JobSpec spec;
  spec.set_seed(std::random_device{}());
  spec.set_steps(10);
  spec.mutable_model()->set_vocab_size(kTokens);
  spec.mutable_model()->set_seq_len(kSeqLen);
  spec.mutable_data()->set_micro_batch_size(kMicroBatch);
  spec.mutable_data()->set_document_masking(masking);
  return spec;
}

struct Read {
  std::vector<int32_t> inputs, targets, doc_starts;
};

Read ReadOne(BatchSource& source, int64_t index) {
  const size_t n = kMicroBatch * kSeqLen;
  Read r{std::vector<int32_t>(n, -7), std::vector<int32_t>(n, -7), std::vector<int32_t>(n, -7)};
  const absl::Status s = source.ReadBatch(index, absl::MakeSpan(r.inputs), absl::MakeSpan(r.targets),
                                          absl::MakeSpan(r.doc_starts));
  EXPECT_TRUE(s.ok()) << s;
  return r;
}

// The masked read against the unmasked one and the index.
void ExpectDocuments(const Read& masked, const Read& plain, const std::vector<uint64_t>& starts) {
  ASSERT_EQ(masked.inputs, plain.inputs);
  EXPECT_TRUE(std::all_of(plain.doc_starts.begin(), plain.doc_starts.end(),
                          [](int32_t v) { return v == 0; }));
  auto begins = [&](int64_t token) {
    return std::binary_search(starts.begin(), starts.end(), static_cast<uint64_t>(token));
  };
  for (int j = 0; j < kMicroBatch; ++j) {
    const int64_t offset = masked.inputs[j * kSeqLen];
    int32_t start = 0;
    for (int i = 0; i < kSeqLen; ++i) {
      const int k = j * kSeqLen + i;
      if (i > 0 && begins(offset + i)) start = i;
      ASSERT_EQ(masked.doc_starts[k], start) << "sequence at " << offset << ", position " << i;
      if (begins(offset + i + 1)) {
        ASSERT_EQ(masked.targets[k], kIgnoreIndex) << "sequence at " << offset << ", position " << i;
      } else {
        ASSERT_EQ(masked.targets[k], plain.targets[k]);
      }
    }
  }
}

TEST(DocumentMasking, TheTrainingTokenFile) {
  const std::string path = TempPath("train.tok");
  const std::vector<uint64_t> starts = WriteDocumentFile(path, true);
  v1::JobSpec masked_spec = BaseSpec(true), plain_spec = BaseSpec(false);
  plain_spec.set_seed(masked_spec.seed());
  masked_spec.mutable_data()->set_token_file(path);
  plain_spec.mutable_data()->set_token_file(path);
  auto masked = OpenBatchSource(masked_spec, 1, 2);
  auto plain = OpenBatchSource(plain_spec, 1, 2);
  ASSERT_TRUE(masked.ok() && plain.ok()) << masked.status() << plain.status();
  for (int64_t step : {0, 1, 7, 1000}) {
    ExpectDocuments(ReadOne(**masked, step), ReadOne(**plain, step), starts);
  }
}

TEST(DocumentMasking, TrainingSources) {
  const std::string a = TempPath("a.tok"), b = TempPath("b.tok");
  // Both files have the same ids; starts differ, so read each source alone.
  for (const std::string& path : {a, b}) {
    const std::vector<uint64_t> starts = WriteDocumentFile(path, true);
    v1::JobSpec masked_spec = BaseSpec(true), plain_spec = BaseSpec(false);
    plain_spec.set_seed(masked_spec.seed());
    for (v1::JobSpec* spec : {&masked_spec, &plain_spec}) {
      v1::DataSource* source = spec->mutable_data()->add_sources();
      source->set_path(path);
      source->set_weight(1);
    }
    auto masked = OpenBatchSource(masked_spec, 0, 1);
    auto plain = OpenBatchSource(plain_spec, 0, 1);
    ASSERT_TRUE(masked.ok() && plain.ok()) << masked.status() << plain.status();
    for (int64_t step : {0, 3, 100}) {
      ExpectDocuments(ReadOne(**masked, step), ReadOne(**plain, step), starts);
    }
  }
}

TEST(DocumentMasking, ValidationTokenFileAndSources) {
  const std::string train = TempPath("vtrain.tok"), val = TempPath("val.tok");
  WriteDocumentFile(train, true);
  const std::vector<uint64_t> starts = WriteDocumentFile(val, true);
  for (bool sources : {false, true}) {
    v1::JobSpec masked_spec = BaseSpec(true), plain_spec = BaseSpec(false);
    for (v1::JobSpec* spec : {&masked_spec, &plain_spec}) {
      spec->mutable_data()->set_token_file(train);
      v1::ValidationConfig* v = spec->mutable_data()->mutable_validation();
      v->set_eval_interval_steps(1);
      v->set_eval_batches(4);
      if (sources) {
        v->add_sources()->set_path(val);
      } else {
        v->set_token_file(val);
      }
    }
    auto masked = OpenValidationSets(masked_spec, 0, 1);
    auto plain = OpenValidationSets(plain_spec, 0, 1);
    ASSERT_TRUE(masked.ok() && plain.ok()) << masked.status() << plain.status();
    for (int64_t batch : {0, 1, 3}) {
      ExpectDocuments(ReadOne(*(*masked)[0].batches, batch), ReadOne(*(*plain)[0].batches, batch),
                      starts);
    }
  }
}

TEST(DocumentMasking, DataWithoutDocumentsIsRefusedNamingTheFieldAndFile) {
  const std::string indexed = TempPath("indexed.tok"), plain = TempPath("plain.tok");
  WriteDocumentFile(indexed, true);
  WriteDocumentFile(plain, false);
  auto expect_refused = [](const absl::Status& s, const std::string& field,
                           const std::string& path) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("data.document_masking: " + field), std::string::npos) << s;
    EXPECT_NE(s.message().find(path), std::string::npos) << s;
  };
  v1::JobSpec spec = BaseSpec(true);
  spec.mutable_data()->set_token_file(plain);
  expect_refused(OpenBatchSource(spec, 0, 1).status(), "data.token_file", plain);
  spec = BaseSpec(true);
  for (const std::string& path : {indexed, plain}) {
    v1::DataSource* source = spec.mutable_data()->add_sources();
    source->set_path(path);
    source->set_weight(1);
  }
  expect_refused(OpenBatchSource(spec, 0, 1).status(), "data.sources[1]", plain);
  spec = BaseSpec(true);
  spec.mutable_data()->set_token_file(indexed);
  v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
  v->set_eval_interval_steps(1);
  v->set_eval_batches(1);
  v->set_token_file(plain);
  expect_refused(OpenValidationSets(spec, 0, 1).status(), "data.validation.token_file", plain);
  v->clear_token_file();
  v->add_sources()->set_path(plain);
  expect_refused(OpenValidationSets(spec, 0, 1).status(), "data.validation.sources[0]", plain);
  spec = BaseSpec(true);
  spec.mutable_data()->mutable_synthetic()->set_task(v1::SyntheticData::COPY);
  const absl::Status synthetic = OpenBatchSource(spec, 0, 1).status();
  EXPECT_EQ(synthetic.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(synthetic.message().find("data.document_masking"), std::string::npos) << synthetic;
  // A doc_starts buffer of the wrong size is refused like the others.
  spec = BaseSpec(true);
  spec.mutable_data()->set_token_file(indexed);
  auto source = OpenBatchSource(spec, 0, 1);
  ASSERT_TRUE(source.ok()) << source.status();
  std::vector<int32_t> full(kMicroBatch * kSeqLen), short_starts(kSeqLen);
  EXPECT_EQ((*source)
                ->ReadBatch(0, absl::MakeSpan(full), absl::MakeSpan(full),
                            absl::MakeSpan(short_starts))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
