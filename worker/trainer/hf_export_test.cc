// The Hugging Face export of a checkpoint trained here (one CPU rank,
// grouped-query attention): the fp32 export holds each master weight's
// exact bits under its Llama name (q/k/v and gate/up split by rows), the
// bf16 export rounds them to nearest even, a pure-Python reader
// (hf_export_check.py: json and numpy only) accepts the files, the newest
// committed step is taken from a root, and a spec of another model or a root
// without a committed step is refused.
#include "client/hf_export.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/sha256.h"
#include "formats/checkpoint_state.h"
#include "formats/token_file.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/comm/file_rendezvous_store_for_test.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/engine/cpu/cpu_ops.h"
#include "worker/trainer/fsdp_trainer.h"
#include "worker/trainer/test_files.h"
#include "worker/trainer/test_job_spec.h"

namespace tessera {
namespace {

// A committed 2-step checkpoint of the tiny GQA model under `root`.
void TrainAndCheckpoint(const v1::JobSpec& spec, const std::string& root) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  ASSERT_TRUE(trainer.Setup(spec, 0, 1).ok());
  FileRendezvousStore store(TestDir("rdzv"));
  ASSERT_TRUE(trainer.InitCollective(&store, "127.0.0.1", absl::Seconds(30)).ok());
  for (int step = 0; step < 2; ++step) ASSERT_TRUE(trainer.RunStep(step).ok());
  ASSERT_TRUE(trainer.Checkpoint(2, root).ok());
  ASSERT_TRUE(WriteCommitMarker(root, {2, 1}).ok());
}

struct Safetensors {
  nlohmann::json header;
  std::string data;
};

Safetensors Load(const std::string& dir) {
  const std::string file = ReadFileToString(dir + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  return {nlohmann::json::parse(file.substr(8, n)), file.substr(8 + n)};
}

uint16_t Bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

int RunChecker(const std::string& dir, const std::string& dtype, const v1::ModelConfig& m) {
  const std::string script = absl::StrCat(std::getenv("TEST_SRCDIR"), "/",
                                          std::getenv("TEST_WORKSPACE"),
                                          "/worker/trainer/hf_export_check.py");
  const std::string command = absl::StrCat(
      "/usr/bin/python3 ", script, " ", dir, " ", dtype, " ", m.vocab_size(), " ", m.d_model(),
      " ", m.ffn_dim(), " ", m.n_layers(), " ", m.n_heads(), " ", m.n_kv_heads());
  return std::system(command.c_str());
}

TEST(HfExport, WritesLlamaNamesWithTheMasterWeightsAndAPythonReaderAgrees) {
  const v1::JobSpec spec = TinyCpuGqaTestJobSpec(2, 2);
  const v1::ModelConfig& m = spec.model();
  const std::string root = TestDir("ckpt");
  TrainAndCheckpoint(spec, root);
  absl::StatusOr<std::vector<FullParameter>> masters = ReadFullParameters(root, 2, nullptr);
  ASSERT_TRUE(masters.ok()) << masters.status();
  std::map<std::string, const FullParameter*> by_name;
  for (const FullParameter& p : *masters) by_name[p.name] = &p;

  const std::string fp32 = TestDir("fp32");
  absl::StatusOr<HfExportReport> report =
      ExportHuggingFace(spec, root + "/step-2", HfExportDType::kFloat32, fp32);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->step, 2);
  EXPECT_EQ(report->tensors, 3 + 9 * m.n_layers());
  const Safetensors f32 = Load(fp32);
  // (Tessera name, first row, Hugging Face name): the splits by rows.
  const int64_t hd = m.d_model() / m.n_heads();
  const std::vector<std::tuple<std::string, int64_t, std::string>> checks = {
      {"embedding", 0, "model.embed_tokens.weight"},
      {"blocks.1.qkv", 0, "model.layers.1.self_attn.q_proj.weight"},
      {"blocks.1.qkv", m.n_heads() * hd, "model.layers.1.self_attn.k_proj.weight"},
      {"blocks.1.qkv", (m.n_heads() + m.n_kv_heads()) * hd,
       "model.layers.1.self_attn.v_proj.weight"},
      {"blocks.0.gate_up", 0, "model.layers.0.mlp.gate_proj.weight"},
      {"blocks.0.gate_up", m.ffn_dim(), "model.layers.0.mlp.up_proj.weight"},
      {"blocks.0.down", 0, "model.layers.0.mlp.down_proj.weight"},
      {"blocks.0.mlp_norm", 0, "model.layers.0.post_attention_layernorm.weight"},
      {"final_norm", 0, "model.norm.weight"},
      {"lm_head", 0, "lm_head.weight"}};
  for (const auto& [tessera, row0, hf] : checks) {
    SCOPED_TRACE(hf);
    ASSERT_TRUE(f32.header.contains(hf));
    const FullParameter& p = *by_name.at(tessera);
    const auto offsets = f32.header[hf]["data_offsets"];
    const int64_t begin = offsets[0], end = offsets[1];
    ASSERT_EQ(0, std::memcmp(f32.data.data() + begin, p.values.data() + row0 * p.cols, end - begin));
  }

  const std::string bf16 = TestDir("bf16");
  ASSERT_TRUE(ExportHuggingFace(spec, root, HfExportDType::kBFloat16, bf16).ok());
  const Safetensors b16 = Load(bf16);
  const FullParameter& head = *by_name.at("lm_head");
  const int64_t begin = b16.header["lm_head.weight"]["data_offsets"][0];
  for (int64_t i = 0; i < static_cast<int64_t>(head.values.size()); ++i) {
    uint16_t got;
    std::memcpy(&got, b16.data.data() + begin + 2 * i, 2);
    ASSERT_EQ(got, Bf16Bits(head.values[i])) << i;
  }
  const nlohmann::json config = nlohmann::json::parse(ReadFileToString(bf16 + "/config.json"));
  EXPECT_EQ(config["num_key_value_heads"], m.n_kv_heads());
  EXPECT_FLOAT_EQ(config["rope_theta"].get<float>(), m.rope_theta());

  EXPECT_EQ(RunChecker(fp32, "F32", m), 0);
  EXPECT_EQ(RunChecker(bf16, "BF16", m), 0);
}

TEST(HfExport, AnotherModelsSpecOrNoCommittedStepIsRefused) {
  const v1::JobSpec spec = TinyCpuGqaTestJobSpec(2, 2);
  const std::string root = TestDir("refused");
  TrainAndCheckpoint(spec, root);
  v1::JobSpec other = spec;
  other.mutable_model()->set_ffn_dim(spec.model().ffn_dim() * 2);
  absl::StatusOr<HfExportReport> wrong =
      ExportHuggingFace(other, root, HfExportDType::kBFloat16, TestDir("wrong"));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition) << wrong.status();
  const std::string out = TestDir("none");
  absl::StatusOr<HfExportReport> none =
      ExportHuggingFace(spec, TestDir("empty-root"), HfExportDType::kBFloat16, out);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound) << none.status();
  struct stat st;
  EXPECT_NE(stat((out + "/model.safetensors").c_str(), &st), 0);
}

TEST(HfExport, TheTokenizerThatMadeTheTokenFileIsCopiedAnyOtherRefused) {
  // The model file's bytes are not parsed here: any bytes stand in for one.
  const std::string dir = TestDir("tokenizer");
  const std::string model = dir + "/tok.model", other = dir + "/other.model";
  WriteStringToFile(model, "a sentencepiece model, byte for byte");
  WriteStringToFile(other, "another model");
  TokenizerInfo made_by;
  made_by.kind = TokenizerKind::kSentencePiece;
  made_by.vocab_size = 300;
  made_by.model_sha256 = Sha256Hex(ReadFileToString(model));
  const std::string tokens = dir + "/train.tok";
  ASSERT_TRUE(WriteTokenFile(tokens, std::vector<uint32_t>{1, 2, 299}, made_by).ok());
  v1::JobSpec spec = TinyCpuGqaTestJobSpec(2, 2);
  spec.mutable_data()->set_token_file(tokens);
  const std::string out = TestDir("tokenizer-out");

  ASSERT_TRUE(ExportTokenizer(spec, model, out).ok());
  EXPECT_EQ(ReadFileToString(out + "/tokenizer.model"), ReadFileToString(model));

  absl::Status wrong = ExportTokenizer(spec, other, TestDir("wrong-out"));
  EXPECT_EQ(wrong.code(), absl::StatusCode::kFailedPrecondition) << wrong;
  EXPECT_NE(wrong.message().find("did not make the job's token file " + tokens), std::string::npos)
      << wrong;
  const std::string bytes = dir + "/bytes.tok";
  ASSERT_TRUE(WriteTokenFile(bytes, std::vector<uint32_t>{1, 2}, TokenizerInfo::Byte()).ok());
  spec.mutable_data()->set_token_file(bytes);
  EXPECT_NE(ExportTokenizer(spec, model, out).message().find("byte-level"), std::string::npos);
  EXPECT_EQ(ExportTokenizer(TinyCpuGqaTestJobSpec(2, 2), model, out).code(),
            absl::StatusCode::kFailedPrecondition);  // synthetic data
  EXPECT_EQ(ExportTokenizer(spec, dir + "/absent.model", out).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera
