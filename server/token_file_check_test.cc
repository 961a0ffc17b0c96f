// Submit-time token file check: a job whose model.vocab_size is smaller than
// the vocabulary of the tokenizer that made its training or validation
// token file is refused with INVALID_ARGUMENT naming model.vocab_size and
// the file, by the coordinator before anything is queued; a vocabulary as
// large passes; files that record no tokenizer (version 1), cannot be read
// or are not token files (a FIFO among them, refused without waiting on it)
// are left to the workers, as before.
#include "server/token_file_check.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "formats/token_file.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "server/fake_worker_connection.h"
#include "server/spec_validation.h"

namespace tessera {
namespace {

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

// A SentencePiece-made token file of the given vocabulary.
std::string SentencePieceFile(const std::string& name, uint32_t vocab) {
  TokenizerInfo info;
  info.kind = TokenizerKind::kSentencePiece;
  info.vocab_size = vocab;
  info.model_sha256 = std::string(64, 'c');
  std::vector<uint32_t> tokens(200);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 7 % vocab);
  const std::string path = TempPath(name);
  EXPECT_TRUE(WriteTokenFile(path, tokens, info).ok());
  return path;
}

v1::JobSpec Spec(int vocab, const std::string& token_file) {
  v1::JobSpec spec;
  v1::ModelConfig* m = spec.mutable_model();
  m->set_vocab_size(vocab);
  m->set_d_model(32);
  m->set_n_layers(1);
  m->set_n_heads(2);
  m->set_ffn_dim(64);
  m->set_seq_len(16);
  spec.mutable_data()->set_token_file(token_file);
  spec.mutable_data()->set_micro_batch_size(2);
  spec.mutable_optimizer()->set_lr(1e-3f);
  spec.set_world_size(1);
  spec.set_steps(3);
  return spec;
}

TEST(TokenFileCheck, VocabularySmallerThanTheTokenizersIsRefused) {
  const std::string path = SentencePieceFile("sp1000.tok", 1000);
  absl::Status s = CheckTokenFilesFitVocab(Spec(999, path));
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("model.vocab_size: 999"), std::string::npos) << s;
  EXPECT_NE(s.message().find("data.token_file " + path), std::string::npos) << s;
  EXPECT_NE(s.message().find("at least 1000"), std::string::npos) << s;
  EXPECT_TRUE(CheckTokenFilesFitVocab(Spec(1000, path)).ok());
  EXPECT_TRUE(CheckTokenFilesFitVocab(Spec(4096, path)).ok());

  // Byte-level files record a vocabulary of 256.
  const std::string bytes = TempPath("bytes.tok");
  ASSERT_TRUE(WriteTokenFile(bytes, std::vector<uint32_t>{1, 2, 3}, TokenizerInfo::Byte()).ok());
  EXPECT_EQ(CheckTokenFilesFitVocab(Spec(128, bytes)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckTokenFilesFitVocab(Spec(256, bytes)).ok());
}

TEST(TokenFileCheck, TheValidationFileIsCheckedToo) {
  v1::JobSpec spec = Spec(300, SentencePieceFile("train300.tok", 300));
  v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
  v->set_token_file(SentencePieceFile("val512.tok", 512));
  v->set_eval_interval_steps(1);
  v->set_eval_batches(1);
  absl::Status s = CheckTokenFilesFitVocab(spec);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("data.validation.token_file"), std::string::npos) << s;
  spec.mutable_model()->set_vocab_size(512);
  EXPECT_TRUE(CheckTokenFilesFitVocab(spec).ok());
}

TEST(TokenFileCheck, FilesWithoutARecordedTokenizerAreLeftToTheWorkers) {
  // Unreadable, not a token file, or no tokenizer recorded: not refused here.
  EXPECT_TRUE(CheckTokenFilesFitVocab(Spec(2, TempPath("missing.tok"))).ok());
  std::ofstream(TempPath("junk.tok")) << "not a token file";
  EXPECT_TRUE(CheckTokenFilesFitVocab(Spec(2, TempPath("junk.tok"))).ok());
  // A FIFO: reading its header once waited for a writer, hanging the submit.
  const std::string fifo = TempPath("fifo.tok");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_TRUE(CheckTokenFilesFitVocab(Spec(2, fifo)).ok());
  const std::string plain = TempPath("plain.tok");
  ASSERT_TRUE(WriteTokenFile(plain, std::vector<uint32_t>{5000, 1}).ok());
  EXPECT_TRUE(CheckTokenFilesFitVocab(Spec(2, plain)).ok());
}

v1::JobSpec MixtureSpec(int vocab, const std::vector<std::string>& paths) {
  v1::JobSpec spec = Spec(vocab, "");
  spec.mutable_data()->clear_token_file();
  for (const std::string& path : paths) {
    v1::DataSource* source = spec.mutable_data()->add_sources();
    source->set_path(path);
    source->set_weight(1);
  }
  return spec;
}

TEST(TokenFileCheck, EveryShardOfEverySourceIsCheckedNamingTheSource) {
  const std::string dir = TempPath("shards");
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string small = SentencePieceFile("shards/a.tok", 500);
  SentencePieceFile("shards/b.tok", 500);
  const std::string single = SentencePieceFile("single500.tok", 500);
  EXPECT_TRUE(CheckTokenFilesFitVocab(MixtureSpec(500, {single, dir})).ok());
  absl::Status s = CheckTokenFilesFitVocab(MixtureSpec(499, {single, dir}));
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("data.sources[0] " + single), std::string::npos) << s;

  // The directory's second shard from another tokenizer: named with its source.
  SentencePieceFile("shards/c.tok", 640);
  s = CheckTokenFilesFitVocab(MixtureSpec(1000, {single, dir}));
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message().rfind("data.sources[1]: " + dir + "/c.tok was made by", 0), 0u) << s;
  EXPECT_NE(s.message().find("data.sources[0] " + single), std::string::npos) << s;

  // Validation sources too.
  v1::JobSpec spec = MixtureSpec(1000, {single});
  v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
  v->add_sources()->set_path(small);
  v->add_sources()->set_path(SentencePieceFile("val-other.tok", 700));
  v->set_eval_interval_steps(1);
  v->set_eval_batches(1);
  s = CheckTokenFilesFitVocab(spec);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message().rfind("data.validation.sources[1]: ", 0), 0u) << s;
}

TEST(TokenFileCheck, TheCoordinatorRefusesAtSubmit) {
  CoordinatorOptions options;
  options.start_background_thread = false;
  options.connect = FakeWorkerConnector();
  Coordinator core(options);
  ASSERT_TRUE(core.Start().ok());
  const std::string path = SentencePieceFile("submit.tok", 700);
  absl::StatusOr<v1::Job> refused = core.SubmitJob(Spec(600, path));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_NE(refused.status().message().find("model.vocab_size"), std::string::npos);
  EXPECT_NE(refused.status().message().find(path), std::string::npos);
  EXPECT_TRUE(core.ListJobs({}, 0, "")->jobs.empty());
  absl::StatusOr<v1::Job> admitted = core.SubmitJob(Spec(700, path));
  ASSERT_TRUE(admitted.ok()) << admitted.status();
}

TEST(TokenFileCheck, DocumentMaskingNeedsADocumentIndexInEveryFile) {
  const std::vector<uint32_t> tokens(100, 7);
  const std::vector<uint64_t> starts = {0, 40};
  const std::string indexed = TempPath("indexed.tok"), plain = TempPath("plain_docs.tok");
  ASSERT_TRUE(WriteTokenFile(indexed, tokens, TokenizerInfo::Byte(), absl::MakeConstSpan(starts)).ok());
  ASSERT_TRUE(WriteTokenFile(plain, tokens, TokenizerInfo::Byte()).ok());
  v1::JobSpec spec = Spec(256, indexed);
  spec.mutable_data()->set_document_masking(true);
  EXPECT_TRUE(CheckTokenFilesFitVocab(spec).ok());
  // A validation file without an index is refused, naming its field and path.
  v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
  v->set_token_file(plain);
  v->set_eval_interval_steps(1);
  v->set_eval_batches(1);
  absl::Status s = CheckTokenFilesFitVocab(spec);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("data.document_masking: data.validation.token_file " + plain),
            std::string::npos) << s;
  EXPECT_NE(s.message().find("records no document starts (token file version 2"), std::string::npos)
      << s;
  // Without masking the same files are fine; a source shard is checked too.
  spec.mutable_data()->set_document_masking(false);
  EXPECT_TRUE(CheckTokenFilesFitVocab(spec).ok());
  spec.mutable_data()->clear_validation();
  spec.mutable_data()->clear_token_file();
  spec.mutable_data()->add_sources()->set_path(indexed);
  spec.mutable_data()->add_sources()->set_path(plain);
  spec.mutable_data()->set_document_masking(true);
  s = CheckTokenFilesFitVocab(spec);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("data.sources[1] " + plain), std::string::npos) << s;
}

}  // namespace
}  // namespace tessera
