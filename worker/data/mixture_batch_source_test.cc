// The mixture sampler against its contract (mixture_batch_source.h): every
// sequence of the test files carries its source and index in its first
// token, so what each read returns is checked from the data itself.
// - three sources weighted 0.5 / 0.3 / 0.2, sized so that 1000 slots are one
//   epoch of each: token shares within 1% of the weights (measured: within
//   one sequence of 500 / 300 / 200), every sequence of every source drawn
//   exactly once in its epoch, and the next epoch again each once, in
//   another order;
// - the same seed draws the same, another seed another order;
// - the ranks of a step draw disjoint sequences, and one rank with the
//   whole global batch draws exactly their union in the same order;
// - a source opened at step N (a resume) reads what the unbroken one read;
// - a directory of shards is read in name order, each file's tail that
//   fills no sequence is never read;
// - a missing source, an empty directory, a non-token file and a token id
//   beyond the vocabulary are errors naming data.sources[i].
#include "worker/data/mixture_batch_source.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "formats/token_file.h"
#include "gtest/gtest.h"
#include "worker/data/batch_source.h"

namespace tessera {
namespace {

constexpr int kSeqLen = 8;
constexpr int kSpan = kSeqLen + 1;
constexpr uint32_t kSourceStride = 100000;  // first token = source * stride + sequence

std::string TempPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

// A token file of `sequences` whole sequences for `source`, numbered from
// `first`, followed by `tail` tokens that fill no sequence.
void WriteSequences(const std::string& path, int source, int first, int sequences, int tail) {
  std::vector<uint32_t> tokens;
  for (int q = first; q < first + sequences; ++q) {
    tokens.push_back(source * kSourceStride + q);
    for (int t = 1; t < kSpan; ++t) tokens.push_back(900000 + t);
  }
  for (int t = 0; t < tail; ++t) tokens.push_back(999999);  // never read
  ASSERT_TRUE(WriteTokenFile(path, tokens).ok()) << path;
}

// Source 0: a directory of three shards holding 200 + 150 + 150 sequences;
// source 1: one file of 300 sequences and a tail; source 2: 200 sequences.
struct ThreeSources {
  std::string dir, second, third;
};

ThreeSources MakeThreeSources(const std::string& name) {
  ThreeSources s;
  s.dir = TempPath(name + "-web");
  ::mkdir(s.dir.c_str(), 0755);
  WriteSequences(s.dir + "/shard-00.tok", 0, 0, 200, 3);
  WriteSequences(s.dir + "/shard-01.tok", 0, 200, 150, kSpan - 1);
  WriteSequences(s.dir + "/shard-02.tok", 0, 350, 150, 0);
  s.second = TempPath(name + "-code.tok");
  WriteSequences(s.second, 1, 0, 300, 5);
  s.third = TempPath(name + "-books.tok");
  WriteSequences(s.third, 2, 0, 200, 0);
  return s;
}

v1::JobSpec MixtureSpec(const ThreeSources& s, int micro_batch, uint64_t seed) {
  v1::JobSpec spec;
  spec.mutable_model()->set_vocab_size(1 << 20);
  spec.mutable_model()->set_seq_len(kSeqLen);
  spec.mutable_data()->set_micro_batch_size(micro_batch);
  spec.set_seed(seed);
  for (auto [path, weight] : {std::pair<std::string, double>{s.dir, 0.5},
                              {s.second, 0.3},
                              {s.third, 0.2}}) {
    v1::DataSource* source = spec.mutable_data()->add_sources();
    source->set_path(path);
    source->set_weight(weight);
  }
  return spec;
}

struct Drawn {
  int source;
  int sequence;
};

// The sequences one rank reads at `step`, identified by their first token;
// also checks every other input and target token is the sequence's own.
std::vector<Drawn> ReadStep(BatchSource& batches, int64_t step, int micro_batch) {
  std::vector<int32_t> inputs(micro_batch * kSeqLen), targets(micro_batch * kSeqLen);
  absl::Status s = batches.ReadBatch(step, absl::MakeSpan(inputs), absl::MakeSpan(targets));
  EXPECT_TRUE(s.ok()) << s;
  std::vector<Drawn> drawn;
  for (int j = 0; j < micro_batch; ++j) {
    const int32_t first = inputs[j * kSeqLen];
    drawn.push_back({static_cast<int>(first / kSourceStride), static_cast<int>(first % kSourceStride)});
    for (int t = 1; t < kSeqLen; ++t) EXPECT_EQ(inputs[j * kSeqLen + t], 900000 + t);
    for (int t = 0; t < kSeqLen; ++t) EXPECT_EQ(targets[j * kSeqLen + t], 900000 + t + 1);
  }
  return drawn;
}

std::unique_ptr<BatchSource> Open(const v1::JobSpec& spec, int rank, int world) {
  absl::StatusOr<std::unique_ptr<BatchSource>> batches = OpenBatchSource(spec, rank, world);
  EXPECT_TRUE(batches.ok()) << batches.status();
  return batches.ok() ? std::move(*batches) : nullptr;
}

TEST(MixtureBatchSourceTest, SharesFollowTheWeightsAndEachEpochVisitsEverySequenceOnce) {
  const ThreeSources files = MakeThreeSources("epoch");
  const v1::JobSpec spec = MixtureSpec(files, /*micro_batch=*/5, /*seed=*/7);
  std::unique_ptr<BatchSource> rank0 = Open(spec, 0, 2), rank1 = Open(spec, 1, 2);
  ASSERT_TRUE(rank0 && rank1);
  const int sizes[3] = {500, 300, 200};
  // Two epochs: 1000 slots each, 10 per step (2 ranks x 5).
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::vector<int>> order(3);
    for (int step = epoch * 100; step < (epoch + 1) * 100; ++step) {
      for (BatchSource* rank : {rank0.get(), rank1.get()}) {
        for (const Drawn& d : ReadStep(*rank, step, 5)) order[d.source].push_back(d.sequence);
      }
    }
    const double weights[3] = {0.5, 0.3, 0.2};
    for (int i = 0; i < 3; ++i) {
      const double share = order[i].size() * kSeqLen / (1000.0 * kSeqLen);
      EXPECT_NEAR(share, weights[i], 0.01) << "source " << i << " epoch " << epoch;
      EXPECT_LE(std::abs(static_cast<int>(order[i].size()) - sizes[i]), 1) << "source " << i;
      // Within the epoch's first `sizes[i]` draws of the source, each
      // sequence exactly once (a draw past them starts the next epoch).
      const size_t n = std::min<size_t>(order[i].size(), sizes[i]);
      std::set<int> distinct(order[i].begin(), order[i].begin() + n);
      EXPECT_EQ(distinct.size(), n) << "a sequence repeated in source " << i;
      for (int q : distinct) EXPECT_LT(q, sizes[i]);
    }
  }
}

TEST(MixtureBatchSourceTest, ASourceThatRunsOutStartsItsNextEpochInANewOrder) {
  const ThreeSources files = MakeThreeSources("wrap");
  const v1::JobSpec spec = MixtureSpec(files, /*micro_batch=*/10, /*seed=*/3);
  std::unique_ptr<BatchSource> one = Open(spec, 0, 1);
  ASSERT_TRUE(one);
  // Source 2 (200 sequences, a fifth of the slots): 3 epochs in 3000 slots.
  std::vector<int> third;
  for (int step = 0; step < 305; ++step) {
    for (const Drawn& d : ReadStep(*one, step, 10)) {
      if (d.source == 2) third.push_back(d.sequence);
    }
  }
  ASSERT_GE(third.size(), 600u);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::set<int> seen(third.begin() + epoch * 200, third.begin() + (epoch + 1) * 200);
    EXPECT_EQ(seen.size(), 200u) << "epoch " << epoch << " skipped or repeated a sequence";
  }
  EXPECT_NE(std::vector<int>(third.begin(), third.begin() + 200),
            std::vector<int>(third.begin() + 200, third.begin() + 400));
}

TEST(MixtureBatchSourceTest, TheSeedDecidesTheOrder) {
  const ThreeSources files = MakeThreeSources("seed");
  std::unique_ptr<BatchSource> a = Open(MixtureSpec(files, 4, 7), 0, 1);
  std::unique_ptr<BatchSource> b = Open(MixtureSpec(files, 4, 7), 0, 1);
  std::unique_ptr<BatchSource> c = Open(MixtureSpec(files, 4, 8), 0, 1);
  int differ = 0;
  for (int step = 0; step < 20; ++step) {
    const std::vector<Drawn> da = ReadStep(*a, step, 4), db = ReadStep(*b, step, 4),
                             dc = ReadStep(*c, step, 4);
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(da[j].source, db[j].source);
      EXPECT_EQ(da[j].sequence, db[j].sequence);
      EXPECT_EQ(da[j].source, dc[j].source);  // the interleave depends on the weights only
      differ += da[j].sequence != dc[j].sequence;
    }
  }
  EXPECT_GT(differ, 60);
}

TEST(MixtureBatchSourceTest, RanksDrawDisjointSlicesOfOneGlobalOrder) {
  const ThreeSources files = MakeThreeSources("ranks");
  // Two ranks of micro-batch 3 against one rank of micro-batch 6: the same
  // global batch of 6, so the same global order, split differently.
  std::unique_ptr<BatchSource> r0 = Open(MixtureSpec(files, 3, 5), 0, 2);
  std::unique_ptr<BatchSource> r1 = Open(MixtureSpec(files, 3, 5), 1, 2);
  std::unique_ptr<BatchSource> whole = Open(MixtureSpec(files, 6, 5), 0, 1);
  for (int step = 0; step < 50; ++step) {
    std::vector<Drawn> both = ReadStep(*r0, step, 3);
    for (const Drawn& d : ReadStep(*r1, step, 3)) both.push_back(d);
    const std::vector<Drawn> one = ReadStep(*whole, step, 6);
    std::set<std::pair<int, int>> distinct;
    for (int j = 0; j < 6; ++j) {
      EXPECT_EQ(both[j].source, one[j].source) << "step " << step;
      EXPECT_EQ(both[j].sequence, one[j].sequence) << "step " << step;
      distinct.insert({both[j].source, both[j].sequence});
    }
    EXPECT_EQ(distinct.size(), 6u) << "ranks overlapped at step " << step;
  }
}

TEST(MixtureBatchSourceTest, AReaderOpenedAtStepNReadsWhatTheUnbrokenOneRead) {
  const ThreeSources files = MakeThreeSources("resume");
  const v1::JobSpec spec = MixtureSpec(files, 5, 21);
  std::unique_ptr<BatchSource> unbroken = Open(spec, 1, 2);
  std::vector<std::vector<Drawn>> want;
  for (int step = 0; step < 150; ++step) want.push_back(ReadStep(*unbroken, step, 5));
  std::unique_ptr<BatchSource> resumed = Open(spec, 1, 2);  // as after a restart
  for (int step = 77; step < 150; ++step) {
    const std::vector<Drawn> got = ReadStep(*resumed, step, 5);
    for (int j = 0; j < 5; ++j) {
      EXPECT_EQ(got[j].source, want[step][j].source);
      EXPECT_EQ(got[j].sequence, want[step][j].sequence);
    }
  }
}

TEST(MixtureBatchSourceTest, TheTraceNamesEachSequencesFileAndOffset) {
  const ThreeSources files = MakeThreeSources("trace");
  const std::string trace = TempPath("trace.txt");
  absl::StatusOr<std::unique_ptr<BatchSource>> batches =
      OpenBatchSource(MixtureSpec(files, 2, 1), 1, 2, trace);
  ASSERT_TRUE(batches.ok()) << batches.status();
  const std::vector<Drawn> drawn = ReadStep(**batches, 4, 2);
  std::ifstream in(trace);
  std::string line;
  for (int j = 0; j < 2; ++j) {
    ASSERT_TRUE(std::getline(in, line));
    EXPECT_EQ(line.rfind(absl::StrCat("step 4 rank 1 slot ", (4 * 2 + 1) * 2 + j, " source ", drawn[j].source,
                                      " epoch 0 sequence "), 0), 0u) << line;
    // Source 0's sequence 250 is shard-01's 50th: offset 50 x 9.
    if (drawn[j].source == 0 && drawn[j].sequence >= 200 && drawn[j].sequence < 350) {
      EXPECT_NE(line.find(absl::StrCat("shard-01.tok offset ", (drawn[j].sequence - 200) * kSpan)),
                std::string::npos) << line;
    }
  }
}

TEST(MixtureBatchSourceTest, UnusableSourcesAreNamed) {
  const ThreeSources files = MakeThreeSources("errors");
  auto expect_error = [](v1::JobSpec spec, const std::string& prefix) {
    absl::StatusOr<std::unique_ptr<BatchSource>> batches = OpenBatchSource(spec, 0, 1);
    ASSERT_FALSE(batches.ok()) << prefix;
    EXPECT_EQ(batches.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(batches.status().message().rfind(prefix, 0), 0u) << batches.status();
  };
  v1::JobSpec spec = MixtureSpec(files, 2, 1);
  spec.mutable_data()->mutable_sources(1)->set_path(TempPath("absent.tok"));
  expect_error(spec, "data.sources[1]: ");

  const std::string empty = TempPath("empty-dir");
  ::mkdir(empty.c_str(), 0755);
  spec = MixtureSpec(files, 2, 1);
  spec.mutable_data()->mutable_sources(2)->set_path(empty);
  expect_error(spec, "data.sources[2]: " + empty + ": directory holds no token files");

  std::ofstream(files.dir + "/shard-03.txt") << "not tokens";
  expect_error(MixtureSpec(files, 2, 1), "data.sources[0]: ");
  std::remove((files.dir + "/shard-03.txt").c_str());

  spec = MixtureSpec(files, 2, 1);
  spec.mutable_model()->set_vocab_size(1000);
  expect_error(spec, "data.sources[0]: " + files.dir + "/shard-00.tok holds token id");

  const std::string short_file = TempPath("short.tok");
  WriteSequences(short_file, 0, 0, 0, kSpan - 1);
  spec = MixtureSpec(files, 2, 1);
  spec.mutable_data()->mutable_sources(1)->set_path(short_file);
  expect_error(spec, "data.sources[1]: " + short_file + " holds no whole sequence");
}

}  // namespace
}  // namespace tessera
