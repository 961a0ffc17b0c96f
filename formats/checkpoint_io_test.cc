// Verified rank checkpoint files: a round trip; a flipped byte, a truncated,
// extended or missing file and a damaged or missing manifest are DATA_LOSS
// naming the file; names and roots that would escape the checkpoint root are
// INVALID_ARGUMENT; a failed write leaves neither temporary files nor a step
// directory behind (but keeps other ranks' files); a foreign spec hash is
// FAILED_PRECONDITION.
#include "formats/checkpoint_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_layout.h"
#include "common/durable_file.h"
#include "common/sha256.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

const std::string kHash = Sha256Hex("spec");
// Bytes that are not text, so the hex encoding in the manifest is exercised.
const ManifestSpec kSpec{kHash, std::string("\x0a\x02\x08\x40\xff", 5), std::string("\x18\x01", 2)};

std::string FreshRoot(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

// The names in dir, sorted; none when it does not exist.
std::vector<std::string> Entries(const std::string& dir) {
  return ListDirectory(dir).value_or(std::vector<std::string>{});
}

auto Bytes(const std::string& data) {
  return [data](DurableFileWriter& w) { return w.Append(data); };
}

// Writes rank 0 of 1 at step 3 with two files; returns the root.
std::string WriteSample(const std::string& name) {
  const std::string root = FreshRoot(name);
  auto writer = RankCheckpointWriter::Begin(root, 3, 0, 1, kSpec);
  EXPECT_TRUE(writer.ok()) << writer.status();
  EXPECT_TRUE((*writer)->AddFile("rank-0.state", Bytes(std::string(5000, 's'))).ok());
  EXPECT_TRUE((*writer)->AddFile("rank-0.extra", Bytes("extra")).ok());
  auto path = (*writer)->Finish();
  EXPECT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, StepDir(root, 3) + "/rank-0.manifest");
  return root;
}

void ExpectDataLossNaming(const absl::StatusOr<std::string>& read, const std::string& file) {
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss) << read.status();
  EXPECT_NE(read.status().message().find(file), absl::string_view::npos) << read.status();
}

TEST(CheckpointIo, RoundTripsAndVerifiesEveryFile) {
  const std::string root = WriteSample("roundtrip");
  EXPECT_EQ(Entries(StepDir(root, 3)),
            (std::vector<std::string>{"rank-0.extra", "rank-0.manifest", "rank-0.state"}));
  auto m = ReadRankManifest(root, 3, 0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->world_size, 1);
  EXPECT_EQ(m->version, kManifestVersion);
  EXPECT_EQ(m->spec.hash, kHash);
  EXPECT_EQ(m->spec.fields, kSpec.fields);
  EXPECT_EQ(m->spec.fp8_recipe, kSpec.fp8_recipe);
  ASSERT_EQ(m->files.size(), 2u);
  EXPECT_EQ(m->files[0].size, 5000);
  EXPECT_TRUE(CheckManifestWorldSize(*m, 1, "m").ok());
  EXPECT_EQ(*ReadVerifiedFile(root, *m, "rank-0.state"), std::string(5000, 's'));
  EXPECT_EQ(*ReadVerifiedFile(root, *m, "rank-0.extra"), "extra");
  ExpectDataLossNaming(ReadVerifiedFile(root, *m, "rank-0.other"), "rank-0.other");
}

TEST(CheckpointIo, DamagedFilesAreDataLossNamingTheFile) {
  const std::string root = WriteSample("damaged");
  const std::string state = StepDir(root, 3) + "/rank-0.state";
  auto m = ReadRankManifest(root, 3, 0);
  ASSERT_TRUE(m.ok());
  {  // one flipped byte
    std::fstream f(state, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(2500);
    f.put('t');
  }
  ExpectDataLossNaming(ReadVerifiedFile(root, *m, "rank-0.state"), "rank-0.state");
  ASSERT_EQ(truncate(state.c_str(), 4000), 0);
  ExpectDataLossNaming(ReadVerifiedFile(root, *m, "rank-0.state"), "rank-0.state");
  ASSERT_EQ(truncate(state.c_str(), 6000), 0);
  ExpectDataLossNaming(ReadVerifiedFile(root, *m, "rank-0.state"), "rank-0.state");
  ASSERT_EQ(unlink(state.c_str()), 0);
  ExpectDataLossNaming(ReadVerifiedFile(root, *m, "rank-0.state"), "rank-0.state");
}

TEST(CheckpointIo, DamagedOrMissingManifestIsDataLoss) {
  const std::string root = WriteSample("manifest");
  const std::string path = StepDir(root, 3) + "/rank-0.manifest";
  std::string text;
  {
    std::ifstream in(path);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string altered = text;
  altered[altered.find("file 5000") + 5] = '4';  // claims 4000 bytes
  std::ofstream(path, std::ios::trunc) << altered;
  auto m = ReadRankManifest(root, 3, 0);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(m.status().message().find("rank-0.manifest"), absl::string_view::npos);
  std::ofstream(path, std::ios::trunc) << text.substr(0, text.size() / 2);
  EXPECT_EQ(ReadRankManifest(root, 3, 0).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadRankManifest(root, 3, 1).status().code(), absl::StatusCode::kDataLoss);  // none
  // Rank 0's manifest copied as rank 1's records the wrong rank.
  std::ofstream(path, std::ios::trunc) << text;
  std::ofstream(StepDir(root, 3) + "/rank-1.manifest") << text;
  EXPECT_EQ(ReadRankManifest(root, 3, 1).status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointIo, NamesAndRootsThatEscapeAreInvalidArguments) {
  const std::string root = WriteSample("escape");
  RankManifest m = *ReadRankManifest(root, 3, 0);
  // A well-formed (correctly checksummed) manifest naming a file outside.
  for (const std::string& name : {std::string("../../etc/passwd"), std::string("..")}) {
    RankManifest evil = m;
    evil.files[0].name = name;
    auto decoded = DecodeManifest(EncodeManifest(evil), "evil");
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_EQ(ReadVerifiedFile(root, evil, name).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  // A listed file that is a symbolic link is not followed.
  const std::string state = StepDir(root, 3) + "/rank-0.state";
  ASSERT_EQ(unlink(state.c_str()), 0);
  ASSERT_EQ(symlink("/etc/hostname", state.c_str()), 0);
  EXPECT_EQ(ReadVerifiedFile(root, m, "rank-0.state").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadRankManifest(root + "/../escape", 3, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RankCheckpointWriter::Begin(root + "/..", 4, 0, 1, kSpec).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto writer = RankCheckpointWriter::Begin(root, 4, 0, 1, kSpec);
  ASSERT_TRUE(writer.ok());
  EXPECT_EQ((*writer)->AddFile("../x", Bytes("x")).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointIo, OtherWorldIsDataLoss) {
  const std::string root = WriteSample("foreign");
  RankManifest m = *ReadRankManifest(root, 3, 0);
  EXPECT_EQ(CheckManifestWorldSize(m, 2, "m").code(), absl::StatusCode::kDataLoss);
}

// A manifest written before the spec and FP8 recipe were recorded (version
// 1) still reads, with only its hash; a version this reader does not know is
// refused.
TEST(CheckpointIo, ReadsVersionOneManifests) {
  std::string body = absl::StrCat("tessera-rank-manifest 1\nstep 3\nrank 0\nworld_size 1\n",
                                  "spec_hash ", kHash, "\nfile 5 ", Sha256Hex("state"),
                                  " rank-0.state\n");
  auto m = DecodeManifest(absl::StrCat(body, "sha256 ", Sha256Hex(body), "\n"), "v1");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->version, 1);
  EXPECT_EQ(m->spec.hash, kHash);
  EXPECT_TRUE(m->spec.fields.empty());
  ASSERT_EQ(m->files.size(), 1u);
  EXPECT_EQ(m->files[0].name, "rank-0.state");

  std::string future = body;
  future[std::string("tessera-rank-manifest ").size()] = '4';
  EXPECT_EQ(DecodeManifest(absl::StrCat(future, "sha256 ", Sha256Hex(future), "\n"), "v4")
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
  // Version 2 without its spec lines is malformed.
  std::string short_v2 = body;
  short_v2[std::string("tessera-rank-manifest ").size()] = '2';
  EXPECT_EQ(DecodeManifest(absl::StrCat(short_v2, "sha256 ", Sha256Hex(short_v2), "\n"), "v2")
                .status()
                .code(),
            absl::StatusCode::kDataLoss);
}

// Version 3 records the writing engine's numerics stack; a version 2
// manifest (without that line) still reads, with the stack empty, and a
// version 3 one without it is malformed.
TEST(CheckpointIo, RecordsTheNumericsStackAndReadsVersionTwo) {
  RankManifest written;
  written.step = 3;
  written.spec = kSpec;
  written.spec.numerics_stack = "CUDA runtime 13000, cuDNN 91400, NVIDIA H100 (sm_90)";
  written.files.push_back({"rank-0.state", 5, Sha256Hex("state")});
  auto back = DecodeManifest(EncodeManifest(written), "v3");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->version, 3);
  EXPECT_EQ(back->spec.numerics_stack, written.spec.numerics_stack);
  EXPECT_EQ(back->spec.fp8_recipe, kSpec.fp8_recipe);

  std::string v2 = absl::StrCat("tessera-rank-manifest 2\nstep 3\nrank 0\nworld_size 1\n",
                                "spec_hash ", kHash, "\nspec ", "\nfp8_recipe ",
                                "\nfile 5 ", Sha256Hex("state"), " rank-0.state\n");
  auto old = DecodeManifest(absl::StrCat(v2, "sha256 ", Sha256Hex(v2), "\n"), "v2");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->version, 2);
  EXPECT_TRUE(old->spec.numerics_stack.empty());
  ASSERT_EQ(old->files.size(), 1u);

  std::string short_v3 = v2;
  short_v3[std::string("tessera-rank-manifest ").size()] = '3';
  auto malformed = DecodeManifest(absl::StrCat(short_v3, "sha256 ", Sha256Hex(short_v3), "\n"), "v3");
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kDataLoss) << malformed.status();
}

TEST(CheckpointIo, AFailedWriteLeavesNoTempFilesAndNoStepDirectory) {
  const std::string root = FreshRoot("failed");
  {
    auto writer = RankCheckpointWriter::Begin(root, 5, 0, 2, kSpec);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->AddFile("rank-0.state", Bytes("complete")).ok());
    absl::Status s = (*writer)->AddFile("rank-0.extra", [](DurableFileWriter& w) {
      if (absl::Status a = w.Append("half of it"); !a.ok()) return a;
      return absl::InternalError("device copy failed");
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  }
  EXPECT_TRUE(Entries(root).empty()) << Entries(root).size();

  // Another rank's finished files stay; only this rank's go.
  {
    auto other = RankCheckpointWriter::Begin(root, 6, 1, 2, kSpec);
    ASSERT_TRUE((*other)->AddFile("rank-1.state", Bytes("one")).ok());
    ASSERT_TRUE((*other)->Finish().ok());
    auto writer = RankCheckpointWriter::Begin(root, 6, 0, 2, kSpec);
    ASSERT_TRUE((*writer)->AddFile("rank-0.state", Bytes("zero")).ok());
  }
  EXPECT_EQ(Entries(StepDir(root, 6)),
            (std::vector<std::string>{"rank-1.manifest", "rank-1.state"}));
}

}  // namespace
}  // namespace tessera
