// The numerics table lists the worst tensors first with their figures; the
// watch line names the worst tensor of each kind; --json keeps only the top.
#include "client/numerics_format.h"

#include "gtest/gtest.h"

namespace tessera {
namespace {

v1::Fp8Numerics Record() {
  v1::Fp8Numerics record;
  record.set_step(40);
  const struct {
    int block;
    const char* linear;
    v1::Fp8TensorStats::Role role;
    double saturated, underflow;
  } tensors[] = {{0, "qkv", v1::Fp8TensorStats::GRADIENT, 0.0, 0.03},
                 {1, "down", v1::Fp8TensorStats::INPUT, 0.05, 0.0},
                 {1, "qkv", v1::Fp8TensorStats::WEIGHT, 0.0, 0.0}};
  for (const auto& t : tensors) {
    v1::Fp8TensorStats* s = record.add_tensors();
    s->set_block(t.block);
    s->set_linear(t.linear);
    s->set_role(t.role);
    s->set_format(t.role == v1::Fp8TensorStats::GRADIENT ? "e5m2" : "e4m3");
    s->set_amax(2.5f);
    s->set_scale(179.2f);
    s->set_saturated_fraction(t.saturated);
    s->set_underflow_fraction(t.underflow);
  }
  return record;
}

TEST(NumericsFormat, TableIsWorstFirst) {
  const std::string table = FormatNumericsTable(Record(), 2);
  EXPECT_EQ(table,
            "FP8 statistics at step 40 (3 tensors; worst 2 first)\n"
            "TENSOR                       FORMAT         AMAX        SCALE   SATURATED   UNDERFLOW\n"
            "block 1 down input           e4m3            2.5        179.2     5.0000%     0.0000%\n"
            "block 0 qkv gradient         e5m2            2.5        179.2     0.0000%     3.0000%\n");
  EXPECT_EQ(WorstOnly(Record(), 1).tensors_size(), 1);
  EXPECT_EQ(WorstOnly(Record(), 1).tensors(0).linear(), "down");
  EXPECT_EQ(WorstOnly(Record(), 0).tensors_size(), 3);
}

TEST(NumericsFormat, WatchLineNamesTheWorstOfEachKind) {
  EXPECT_EQ(NumericsLine(Record()),
            "[numerics] step 40: worst saturation 5.00% (block 1 down input), worst underflow "
            "3.00% (block 0 qkv gradient), 3 tensors");
}

}  // namespace
}  // namespace tessera
