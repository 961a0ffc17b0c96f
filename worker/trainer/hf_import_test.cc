// Starting a job from a Hugging Face directory (model.init_from) on the CPU
// engine:
//  - a one-rank checkpoint exported in fp32 and imported by a two-rank job
//    (forked processes, real Gloo) gives each rank exactly the master
//    weights of the checkpoint: the imported job's own checkpoint, gathered,
//    is bit-identical;
//  - a job imported from that export (bf16 compute) scores the prompt's
//    logits of the trained job bit for bit before it runs a step, at world
//    size 1 and 2, and its validation loss (bit for bit on one rank);
//    imported from the bf16 export the loss stays within bf16 rounding;
//  - a tied-embedding checkpoint (no lm_head.weight) starts the LM head from
//    the embedding, and a sharded checkpoint (index.json) reads each tensor
//    from the file its index names;
//  - directories that do not fit the model are refused with
//    INVALID_ARGUMENT naming the file, field or tensor (FIFOs in place of
//    the files included, without waiting on them), and a directory that is
//    not there is NOT_FOUND.
#include "formats/hf_import.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/hf_export.h"
#include "common/checkpoint_layout.h"
#include "formats/checkpoint_state.h"
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

const std::string& ValidationFile() {
  static const std::string path = AdditionTokenFile("validation", 99, 20000);
  return path;
}

// The tiny GQA model with bf16 compute (FP8 scales would otherwise differ
// between a trained job and a fresh one) and validation data.
v1::JobSpec Spec() {
  v1::JobSpec spec = TinyCpuGqaTestJobSpec(2, 2);
  spec.mutable_fp8()->set_disabled(true);
  v1::ValidationConfig* v = spec.mutable_data()->mutable_validation();
  v->set_token_file(ValidationFile());
  v->set_eval_interval_steps(2);
  v->set_eval_batches(2);
  return spec;
}

// Scored by every job of these tests (ForwardLogits), its logits written
// raw beside the checkpoint.
const std::vector<int32_t> kPrompt = {'4', '2', '+', '1', '7', '=', '5', '9', '\n', '3'};

void WriteLogits(FsdpTrainer& trainer, const std::string& path) {
  absl::StatusOr<std::vector<float>> logits = trainer.ForwardLogits(kPrompt);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (logits.ok()) WriteRawValues(path, *logits);
}

// Trains `steps` steps on one rank and commits a checkpoint of step
// `steps` under `root`, with the prompt's logits in root/logits; returns
// the validation loss after the last step.
float TrainOneRank(const v1::JobSpec& spec, int steps, const std::string& root) {
  FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
  EXPECT_TRUE(trainer.Setup(spec, 0, 1).ok());
  FileRendezvousStore store(TestDir("rdzv"));
  EXPECT_TRUE(trainer.InitCollective(&store, "127.0.0.1", absl::Seconds(30)).ok());
  for (int step = 0; step < steps; ++step) EXPECT_TRUE(trainer.RunStep(step).ok());
  EXPECT_TRUE(trainer.Checkpoint(steps, root).ok());
  EXPECT_TRUE(WriteCommitMarker(root, {steps, 1}).ok());
  WriteLogits(trainer, root + "/logits");
  absl::StatusOr<ValidationReport> v = trainer.Evaluate();
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? v->loss : NAN;
}

// Sets up `world` ranks of `spec` in forked processes; each evaluates once
// (writing the loss's bits to root/eval-R) and scores the prompt
// (root/logits-R), then checkpoints step 0 into `root`, which rank 0
// commits.
void ImportAndCheckpoint(const v1::JobSpec& spec, int world, const std::string& root) {
  const std::string rdzv = TestDir("rdzv");
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      FsdpTrainer trainer(CreateCpuOps(), CreateGlooCommunicator);
      absl::StatusOr<SetupReport> setup = trainer.Setup(spec, rank, world);
      if (!setup.ok()) {
        fprintf(stderr, "rank %d: %s\n", rank, setup.status().ToString().c_str());
        _exit(2);
      }
      FileRendezvousStore store(rdzv);
      if (!trainer.InitCollective(&store, "127.0.0.1", absl::Seconds(30)).ok()) _exit(3);
      absl::StatusOr<ValidationReport> v = trainer.Evaluate();
      if (!v.ok()) _exit(4);
      uint32_t bits;
      std::memcpy(&bits, &v->loss, 4);
      WriteStringToFile(absl::StrCat(root, "/eval-", rank), std::to_string(bits));
      WriteLogits(trainer, absl::StrCat(root, "/logits-", rank));
      if (!trainer.Checkpoint(0, root).ok()) _exit(5);
      _exit(0);
    }
    pids.push_back(pid);
  }
  for (int rank = 0; rank < world; ++rank) {
    int status = 0;
    waitpid(pids[rank], &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << rank << " exit " << WEXITSTATUS(status);
  }
  ASSERT_TRUE(WriteCommitMarker(root, {0, world}).ok());
}

float EvalLoss(const std::string& root, int rank) {
  const uint32_t bits = static_cast<uint32_t>(std::stoul(ReadFileToString(absl::StrCat(root, "/eval-", rank))));
  float loss;
  std::memcpy(&loss, &bits, 4);
  return loss;
}

TEST(HfImport, AnExportImportedAtAnotherWorldSizeGivesBitIdenticalWeightsAndLoss) {
  const v1::JobSpec spec = Spec();
  const std::string trained = TestDir("trained");
  const float trained_loss = TrainOneRank(spec, 3, trained);
  const std::string fp32 = TestDir("fp32");
  ASSERT_TRUE(ExportHuggingFace(spec, trained, HfExportDType::kFloat32, fp32).ok());

  v1::JobSpec imported = spec;
  imported.mutable_model()->set_init_from(fp32);
  // Two ranks at half the micro-batch score the same validation sequences.
  v1::JobSpec imported_two = imported;
  imported_two.mutable_data()->set_micro_batch_size(spec.data().micro_batch_size() / 2);
  const std::string two = TestDir("imported-two");
  ImportAndCheckpoint(imported_two, 2, two);
  const std::string one = TestDir("imported-one");
  ImportAndCheckpoint(imported, 1, one);

  absl::StatusOr<std::vector<FullParameter>> want = ReadFullParameters(trained, 3, nullptr);
  ASSERT_TRUE(want.ok()) << want.status();
  for (const std::string& root : {two, one}) {
    absl::StatusOr<std::vector<FullParameter>> got = ReadFullParameters(root, 0, nullptr);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), want->size());
    for (size_t i = 0; i < want->size(); ++i) {
      SCOPED_TRACE((*want)[i].name);
      ASSERT_EQ((*got)[i].name, (*want)[i].name);
      ASSERT_EQ((*got)[i].values.size(), (*want)[i].values.size());
      EXPECT_EQ(0, std::memcmp((*got)[i].values.data(), (*want)[i].values.data(),
                               4 * (*want)[i].values.size()));
    }
  }
  // Zero steps after the import: the trained job's validation loss, bit for
  // bit on one rank; on two ranks the same sequences summed in another
  // order, and both ranks report the same value.
  EXPECT_EQ(EvalLoss(one, 0), trained_loss);
  // And the same logits, bit for bit, at either world size.
  const std::string trained_logits = ReadFileToString(trained + "/logits");
  ASSERT_EQ(trained_logits.size(), kPrompt.size() * spec.model().vocab_size() * sizeof(float));
  EXPECT_EQ(ReadFileToString(one + "/logits-0"), trained_logits);
  EXPECT_EQ(ReadFileToString(two + "/logits-0"), trained_logits);
  EXPECT_EQ(ReadFileToString(two + "/logits-1"), trained_logits);
  EXPECT_EQ(EvalLoss(two, 0), EvalLoss(two, 1));
  EXPECT_NEAR(EvalLoss(two, 0), trained_loss, 1e-5 * trained_loss);

  // From the bf16 export: the master weights are the bf16 values, so the
  // loss moves by bf16 rounding of the weights only.
  const std::string bf16 = TestDir("bf16");
  ASSERT_TRUE(ExportHuggingFace(spec, trained, HfExportDType::kBFloat16, bf16).ok());
  imported.mutable_model()->set_init_from(bf16);
  const std::string from_bf16 = TestDir("imported-bf16");
  ImportAndCheckpoint(imported, 1, from_bf16);
  EXPECT_NEAR(EvalLoss(from_bf16, 0), trained_loss, 2e-2 * trained_loss);
}

// A small fp32 export to edit in the refusal tests.
const std::string& ExportedDir() {
  static const std::string* dir = [] {
    const v1::JobSpec spec = Spec();
    const std::string trained = TestDir("to-edit");
    TrainOneRank(spec, 1, trained);
    auto* out = new std::string(TestDir("export"));
    EXPECT_TRUE(ExportHuggingFace(spec, trained, HfExportDType::kFloat32, *out).ok());
    return out;
  }();
  return *dir;
}

// A copy of the export with config.json and the safetensors header passed
// through `edit_config` and `edit_header` (tensor data kept, offsets as
// they were).
std::string EditedCopy(const std::string& name,
                       const std::function<void(nlohmann::json&)>& edit_config,
                       const std::function<void(nlohmann::json&)>& edit_header) {
  const std::string dir = TestDir(name);
  nlohmann::json config = nlohmann::json::parse(ReadFileToString(ExportedDir() + "/config.json"));
  edit_config(config);
  WriteStringToFile(dir + "/config.json", config.dump());
  const std::string file = ReadFileToString(ExportedDir() + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  nlohmann::json header = nlohmann::json::parse(file.substr(8, n));
  edit_header(header);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  WriteStringToFile(dir + "/model.safetensors", length + text + file.substr(8 + n));
  return dir;
}

absl::Status OpenWithSpec(const std::string& dir) {
  return HfLlamaSource::Open(Spec().model(), dir).status();
}

void ExpectRefused(const std::string& dir, const std::string& says) {
  absl::Status s = OpenWithSpec(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("model.init_from: "), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find(says), std::string::npos) << s;
}

TEST(HfImport, DirectoriesThatDoNotFitTheModelAreRefusedNamingWhy) {
  auto keep = [](nlohmann::json&) {};
  ASSERT_TRUE(OpenWithSpec(ExportedDir()).ok()) << OpenWithSpec(ExportedDir());
  ExpectRefused(EditedCopy("wide", [](nlohmann::json& c) { c["hidden_size"] = 64; }, keep),
                "hidden_size is 64, but model.d_model is 32");
  ExpectRefused(EditedCopy("kv", [](nlohmann::json& c) { c["num_key_value_heads"] = 4; }, keep),
                "num_key_value_heads is 4, but model.n_kv_heads is 2");
  ExpectRefused(EditedCopy("theta",
                           [](nlohmann::json& c) {
                             c["rope_theta"] = 500000.0;
                             c.erase("rope_parameters");
                           },
                           keep),
                "rope_theta is 500000, but model.rope_theta is 10000");
  ExpectRefused(EditedCopy("theta-disagrees", [](nlohmann::json& c) { c["rope_theta"] = 500000.0; },
                           keep),
                "rope_theta 500000.0 and rope_parameters.rope_theta 10000.0 disagree");
  // transformers 5 keeps theta in rope_parameters; a scaled kind is refused.
  const std::string theta_in_parameters = EditedCopy(
      "rope-parameters",
      [](nlohmann::json& c) {
        c.erase("rope_theta");
        c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
      },
      keep);
  EXPECT_TRUE(OpenWithSpec(theta_in_parameters).ok()) << OpenWithSpec(theta_in_parameters);
  ExpectRefused(EditedCopy("rope-parameters-theta",
                           [](nlohmann::json& c) {
                             c.erase("rope_theta");
                             c["rope_parameters"] = {{"rope_theta", 500000.0}};
                           },
                           keep),
                "rope_theta is 500000, but model.rope_theta is 10000");
  ExpectRefused(EditedCopy("llama3-rope",
                           [](nlohmann::json& c) { c["rope_parameters"]["rope_type"] = "llama3"; },
                           keep),
                "rope_parameters.rope_type \"llama3\" is not supported");
  // Hugging Face's default eps (1e-6) applies when the key is left out.
  ExpectRefused(EditedCopy("eps", [](nlohmann::json& c) { c.erase("rms_norm_eps"); }, keep),
                "rms_norm_eps is 1e-06, but model.norm_eps is");
  ExpectRefused(EditedCopy("type", [](nlohmann::json& c) { c["model_type"] = "gpt2"; }, keep),
                "model_type is \"gpt2\"");
  ExpectRefused(EditedCopy("scaled", [](nlohmann::json& c) { c["rope_scaling"] = {{"factor", 8}}; }, keep),
                "rope_scaling");
  ExpectRefused(EditedCopy("bias", [](nlohmann::json& c) { c["attention_bias"] = true; }, keep),
                "attention_bias is true");
  ExpectRefused(EditedCopy("layers", [](nlohmann::json& c) { c.erase("num_hidden_layers"); }, keep),
                "num_hidden_layers is missing");
  ExpectRefused(EditedCopy("missing", keep,
                           [](nlohmann::json& h) { h.erase("model.layers.1.mlp.up_proj.weight"); }),
                "tensor model.layers.1.mlp.up_proj.weight is missing");
  ExpectRefused(EditedCopy("untied", keep, [](nlohmann::json& h) { h.erase("lm_head.weight"); }),
                "tensor lm_head.weight is missing (and config.json does not say tie_word_embeddings)");
  ExpectRefused(EditedCopy("shape", keep,
                           [](nlohmann::json& h) {
                             h["model.norm.weight"]["shape"] = {16, 2};
                           }),
                "tensor model.norm.weight is [16, 2], the job's model needs [32]");
  ExpectRefused(EditedCopy("extra", keep,
                           [](nlohmann::json& h) {
                             h["model.layers.0.self_attn.q_proj.bias"] = {
                                 {"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
                           }),
                "tensor model.layers.0.self_attn.q_proj.bias has no place in Tessera's Llama model");
  ExpectRefused(EditedCopy("dtype", keep,
                           [](nlohmann::json& h) { h["model.norm.weight"]["dtype"] = "BF16"; }),
                "model.norm.weight: data_offsets hold 128 bytes, its shape needs 64");
  // Rotary inverse frequencies some checkpoints carry are ignored.
  const std::string rotary = EditedCopy("rotary", keep, [](nlohmann::json& h) {
    h["model.layers.0.self_attn.rotary_emb.inv_freq"] = {
        {"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {0, 0}}};
  });
  EXPECT_TRUE(OpenWithSpec(rotary).ok()) << OpenWithSpec(rotary);

  EXPECT_EQ(OpenWithSpec(TestDir("empty")).code(), absl::StatusCode::kNotFound);
  // FIFOs where the files should be are refused at once, never waited on
  // (the coordinator opens these at submit).
  const std::string fifo_config = TestDir("fifo-config");
  ASSERT_EQ(mkfifo((fifo_config + "/config.json").c_str(), 0600), 0);
  ExpectRefused(fifo_config, "config.json: is not a regular file");
  const std::string fifo_weights = TestDir("fifo-weights");
  WriteStringToFile(fifo_weights + "/config.json", ReadFileToString(ExportedDir() + "/config.json"));
  ASSERT_EQ(mkfifo((fifo_weights + "/model.safetensors").c_str(), 0600), 0);
  ExpectRefused(fifo_weights, "model.safetensors: is not a regular file");
  EXPECT_EQ(OpenWithSpec(std::string(std::getenv("TEST_TMPDIR")) + "/no/such/dir").code(),
            absl::StatusCode::kNotFound);
}

TEST(HfImport, ANonFiniteWeightIsRefusedNamingTheTensor) {
  const std::string dir = EditedCopy("nonfinite", [](nlohmann::json&) {}, [](nlohmann::json&) {});
  std::string file = ReadFileToString(dir + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(file.substr(8, n));
  const int64_t begin = header["model.layers.0.mlp.down_proj.weight"]["data_offsets"][0];
  const float inf = INFINITY;
  std::memcpy(file.data() + 8 + n + begin + 4 * 5, &inf, 4);
  WriteStringToFile(dir + "/model.safetensors", file);
  absl::StatusOr<std::unique_ptr<HfLlamaSource>> source = HfLlamaSource::Open(Spec().model(), dir);
  ASSERT_TRUE(source.ok()) << source.status();
  std::vector<float> out(48 * 32);
  absl::Status s = (*source)->Read("blocks.0.down", 0, 32 * 48, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("model.layers.0.mlp.down_proj.weight holds inf at element 5"),
            std::string::npos)
      << s;
}

TEST(HfImport, TiedEmbeddingsAndShardedFilesAreRead) {
  // Tied: no lm_head.weight; the head starts as the embedding.
  const std::string tied = EditedCopy(
      "tied", [](nlohmann::json& c) { c["tie_word_embeddings"] = true; },
      [](nlohmann::json& h) { h.erase("lm_head.weight"); });
  absl::StatusOr<std::unique_ptr<HfLlamaSource>> source = HfLlamaSource::Open(Spec().model(), tied);
  ASSERT_TRUE(source.ok()) << source.status();
  const int64_t numel = 64 * 32;
  std::vector<float> head(numel), embedding(numel);
  ASSERT_TRUE((*source)->Read("lm_head", 0, numel, head.data()).ok());
  ASSERT_TRUE((*source)->Read("embedding", 0, numel, embedding.data()).ok());
  EXPECT_EQ(head, embedding);

  // Sharded: the same file twice under two names, with an index that takes
  // the embedding from the second and everything else from the first. A
  // shard name that is a path is refused.
  const std::string sharded = TestDir("sharded");
  WriteStringToFile(sharded + "/config.json", ReadFileToString(ExportedDir() + "/config.json"));
  const std::string file = ReadFileToString(ExportedDir() + "/model.safetensors");
  WriteStringToFile(sharded + "/model-00001-of-00002.safetensors", file);
  WriteStringToFile(sharded + "/model-00002-of-00002.safetensors", file);
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(file.substr(8, n));
  nlohmann::json index = {{"metadata", {{"total_size", file.size() - 8 - n}}},
                          {"weight_map", nlohmann::json::object()}};
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    index["weight_map"][it.key()] = it.key() == "model.embed_tokens.weight"
                                        ? "model-00002-of-00002.safetensors"
                                        : "model-00001-of-00002.safetensors";
  }
  WriteStringToFile(sharded + "/model.safetensors.index.json", index.dump());
  source = HfLlamaSource::Open(Spec().model(), sharded);
  ASSERT_TRUE(source.ok()) << source.status();
  std::vector<float> from_shards(numel);
  ASSERT_TRUE((*source)->Read("embedding", 0, numel, from_shards.data()).ok());
  EXPECT_EQ(from_shards, embedding);

  index["weight_map"]["model.norm.weight"] = "../elsewhere.safetensors";
  WriteStringToFile(sharded + "/model.safetensors.index.json", index.dump());
  ExpectRefused(sharded, "model.norm.weight names \"../elsewhere.safetensors\", not a file in the directory");
  index["weight_map"]["model.norm.weight"] = "model-00003-of-00002.safetensors";
  WriteStringToFile(sharded + "/model.safetensors.index.json", index.dump());
  EXPECT_EQ(OpenWithSpec(sharded).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera
