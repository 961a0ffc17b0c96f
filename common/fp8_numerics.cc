// FP8 statistics records (see fp8_numerics.h).
#include "common/fp8_numerics.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

bool SameTensor(const v1::Fp8TensorStats& a, const v1::Fp8TensorStats& b) {
  return a.block() == b.block() && a.linear() == b.linear() && a.role() == b.role();
}

const char* RoleName(v1::Fp8TensorStats::Role role) {
  switch (role) {
    case v1::Fp8TensorStats::WEIGHT:
      return "weight";
    case v1::Fp8TensorStats::INPUT:
      return "input";
    case v1::Fp8TensorStats::GRADIENT:
      return "gradient";
    default:
      return "tensor";
  }
}

}  // namespace

double SaturationWarnFraction(const v1::Fp8Recipe& recipe) {
  return recipe.saturation_warn_fraction() > 0 ? recipe.saturation_warn_fraction() : 0.001;
}

double UnderflowWarnFraction(const v1::Fp8Recipe& recipe) {
  return recipe.underflow_warn_fraction() > 0 ? recipe.underflow_warn_fraction() : 0.5;
}

void AddRankNumerics(const google::protobuf::RepeatedPtrField<v1::Fp8TensorStats>& rank,
                     v1::Fp8Numerics& record) {
  for (int i = 0; i < rank.size(); ++i) {
    const v1::Fp8TensorStats& part = rank[i];
    // Every rank reports its tensors in the same order: look there first.
    v1::Fp8TensorStats* into = nullptr;
    if (i < record.tensors_size() && SameTensor(record.tensors(i), part)) {
      into = record.mutable_tensors(i);
    } else {
      for (v1::Fp8TensorStats& t : *record.mutable_tensors()) {
        if (SameTensor(t, part)) into = &t;
      }
    }
    if (into == nullptr) {
      *record.add_tensors() = part;
      continue;
    }
    into->set_amax(std::max(into->amax(), part.amax()));
    into->set_scale(std::max(into->scale(), part.scale()));
    into->set_saturated(into->saturated() + part.saturated());
    into->set_underflowed(into->underflowed() + part.underflowed());
    into->set_elements(into->elements() + part.elements());
  }
}

void SetFractions(v1::Fp8Numerics& record) {
  for (v1::Fp8TensorStats& t : *record.mutable_tensors()) {
    const double n = static_cast<double>(std::max<int64_t>(1, t.elements()));
    t.set_saturated_fraction(static_cast<double>(t.saturated()) / n);
    t.set_underflow_fraction(static_cast<double>(t.underflowed()) / n);
  }
}

std::string Fp8TensorName(const v1::Fp8TensorStats& tensor) {
  return absl::StrCat("block ", tensor.block(), " ", tensor.linear(), " ", RoleName(tensor.role()));
}

std::vector<v1::Fp8TensorStats> WorstFp8Tensors(const v1::Fp8Numerics& record, int top) {
  std::vector<v1::Fp8TensorStats> tensors(record.tensors().begin(), record.tensors().end());
  std::stable_sort(tensors.begin(), tensors.end(),
                   [](const v1::Fp8TensorStats& a, const v1::Fp8TensorStats& b) {
                     return std::make_tuple(-a.saturated_fraction(), -a.underflow_fraction(),
                                            a.block(), a.linear(), static_cast<int>(a.role())) <
                            std::make_tuple(-b.saturated_fraction(), -b.underflow_fraction(),
                                            b.block(), b.linear(), static_cast<int>(b.role()));
                   });
  if (top > 0 && static_cast<int>(tensors.size()) > top) tensors.resize(top);
  return tensors;
}

double WorstSaturation(const v1::Fp8Numerics& record) {
  double worst = 0;
  for (const v1::Fp8TensorStats& t : record.tensors()) worst = std::max(worst, t.saturated_fraction());
  return worst;
}

double WorstUnderflow(const v1::Fp8Numerics& record) {
  double worst = 0;
  for (const v1::Fp8TensorStats& t : record.tensors()) worst = std::max(worst, t.underflow_fraction());
  return worst;
}

}  // namespace tessera
