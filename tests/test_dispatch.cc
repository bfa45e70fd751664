// SPDX-License-Identifier: Apache-2.0
// test_dispatch: the kernels that run under an ISA are that ISA's. Inside (against the
// static library): every per-target table the op layers take under the selected ISA
// was compiled for it. Outside (through the C ABI only): the same input gives
// different bits under ISAs whose merge trees differ (vector widths, FMA), and the same
// bits where they are alike, so a build whose nk_set_isa("AVX2") ran AVX3's kernels
// fails here even where every other test passes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#if defined(__aarch64__)
#include <sys/prctl.h>
#endif

#include "hwy/targets.h"
#include "kernels/batchnorm/channelnorm.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/half_convert.h"
#include "kernels/layernorm/rownorm.h"
#include "test_util.h"

namespace nk_test {
namespace {

class Dispatch : public IsaTest {};

// The target the library runs now is the one nk_get_isa names, and every table of it
// (three tensor types each) was compiled for that target.
TEST_P(Dispatch, TablesAreTheSelectedIsas) {
  const int64_t target = nk::CurrentTarget();
  ASSERT_STREQ(hwy::TargetName(target), GetParam().c_str());
  EXPECT_EQ(nk::RowNormKernelsFor<float>(target).target, target);
  EXPECT_EQ(nk::RowNormKernelsFor<hwy::bfloat16_t>(target).target, target);
  EXPECT_EQ(nk::RowNormKernelsFor<hwy::float16_t>(target).target, target);
  EXPECT_EQ(nk::RowGradKernelsFor<float>(target).target, target);
  EXPECT_EQ(nk::RowGradKernelsFor<hwy::bfloat16_t>(target).target, target);
  EXPECT_EQ(nk::RowGradKernelsFor<hwy::float16_t>(target).target, target);
  EXPECT_EQ(nk::ChannelNormKernelsFor<float>(target).target, target);
  EXPECT_EQ(nk::ChannelNormKernelsFor<hwy::bfloat16_t>(target).target, target);
  EXPECT_EQ(nk::ChannelNormKernelsFor<hwy::float16_t>(target).target, target);
  EXPECT_EQ(nk::HalfConvertKernelsFor(target).target, target);
}

NK_INSTANTIATE_FOR_EACH_ISA(Dispatch);

// The bits of a LayerNorm forward (y, mean, rstd), its backward (dx) and a BatchNorm
// training forward (y, mean, rstd) of a fixed input (rows and planes of 1031 values,
// long enough for every lane tree) under `isa`, each op's apart.
std::vector<std::vector<float>> Bits(const std::string& isa) {
  EXPECT_EQ(nk_set_isa(isa.c_str()), NK_OK) << nk_last_error();
  constexpr size_t kRows = 16, kCols = 1031, kN = kRows * kCols;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.5f, 2.0f);
  std::vector<float> x(kN), dy(kN);
  for (float& v : x) v = normal(rng);
  for (float& v : dy) v = normal(rng);
  std::vector<float> y(kN), mean(kRows), rstd(kRows), dx(kN), dgamma(kCols), dbeta(kCols);
  EXPECT_EQ(nk_layernorm_forward_f32(kRows, kCols, x.data(), nullptr, nullptr, 1e-5f,
                                     y.data(), mean.data(), rstd.data()),
            NK_OK);
  EXPECT_EQ(nk_layernorm_backward_f32(kRows, kCols, x.data(), dy.data(), mean.data(),
                                      rstd.data(), nullptr, dx.data(), dgamma.data(),
                                      dbeta.data()),
            NK_OK);
  // BatchNorm of 16 channels, each a plane of 1031 values.
  std::vector<float> bn_y(kN), bn_mean(kRows), bn_rstd(kRows);
  EXPECT_EQ(nk_batchnorm_forward_training_f32(
                1, kRows, kCols, NK_LAYOUT_NCHW, x.data(), nullptr, nullptr, 1e-5f, 0.1f,
                nullptr, nullptr, bn_y.data(), bn_mean.data(), bn_rstd.data()),
            NK_OK);
  nk_set_isa(nullptr);
  const auto join = [](std::initializer_list<const std::vector<float>*> parts) {
    std::vector<float> all;
    for (const auto* v : parts) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  return {join({&y, &mean, &rstd}), dx, join({&bn_y, &bn_mean, &bn_rstd})};
}

// The CPU's SVE vector length in bytes (0 without SVE).
size_t SveVectorBytes() {
#if defined(__aarch64__) && defined(PR_SVE_GET_VL)
  const int vl = prctl(PR_SVE_GET_VL);
  return vl < 0 ? 0 : static_cast<size_t>(vl & PR_SVE_VL_LEN_MASK);
#else
  return 0;
#endif
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}
constexpr const char* kOps[] = {"LayerNorm forward", "LayerNorm backward",
                                "BatchNorm training"};

// ISAs of different vector widths (or one with FMA, one without) merge in different
// trees: their bits differ somewhere. SSE4 and SSSE3 (4 lanes, no FMA) agree.
TEST(DispatchBits, DifferWhereTheTreesDiffer) {
  const std::vector<std::string> isas = Isas();
  std::map<std::string, std::vector<std::vector<float>>> bits;
  for (const std::string& isa : isas) bits[isa] = Bits(isa);
  // Family, lanes of fp32 and whether the target fuses multiply-add. SVE's lanes are
  // the CPU's (SVE_256: 8, SVE2_128: 4). Across families at one width the trees may
  // or may not differ, so such pairs are not compared: NEON and SVE reduce lanes in
  // Highway's orders, and SVE_256, whose vectors are at most 32 bytes, takes moments
  // in blocks of 8 vectors where SVE and SVE2 (at most 256 bytes) take 16.
  const int sve_lanes = static_cast<int>(SveVectorBytes() / 4);
  const std::map<std::string, std::tuple<int, int, bool>> shape = {
      {"AVX3", {0, 16, true}},        {"AVX2", {0, 8, true}},
      {"SSE4", {0, 4, false}},        {"SSSE3", {0, 4, false}},
      {"EMU128", {0, 4, false}},      {"SCALAR", {0, 1, false}},
      {"NEON", {1, 4, true}},         {"SVE", {2, sve_lanes, true}},
      {"SVE2", {2, sve_lanes, true}}, {"SVE_256", {3, 8, true}},
      {"SVE2_128", {2, 4, true}}};
  int compared = 0;
  for (size_t i = 0; i < isas.size(); ++i) {
    for (size_t j = i + 1; j < isas.size(); ++j) {
      const auto a = shape.find(isas[i]), b = shape.find(isas[j]);
      if (a == shape.end() || b == shape.end()) continue;
      const bool alike = a->second == b->second;
      if (alike && (isas[i] == "EMU128" || isas[j] == "EMU128")) continue;
      if (std::get<0>(a->second) != std::get<0>(b->second) &&
          std::get<1>(a->second) == std::get<1>(b->second)) {
        continue;
      }
      for (size_t op = 0; op < bits[isas[i]].size(); ++op) {
        EXPECT_EQ(SameBits(bits[isas[i]][op], bits[isas[j]][op]), alike)
            << kOps[op] << ": " << isas[i] << " and " << isas[j]
            << (alike ? " should give the same bits" : " gave the same bits");
      }
      ++compared;
    }
  }
  if (isas.size() > 1) {
    EXPECT_GT(compared, 0);
  }
}

}  // namespace
}  // namespace nk_test
