// The float16 / bfloat16 vector kernels (core/reduce_simd.cpp) against the scalar ones of
// core/dtype.cpp: the same bits for every input, NaN, infinities, subnormals and ties included.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/reduce_simd.hpp"

namespace ringrun {
namespace {

using Bits = std::vector<std::uint16_t>;

constexpr std::size_t kPatterns = 0x10000;

// Zeros, the smallest and largest subnormals, one, the largest finite values, infinities, quiet
// and signalling NaNs of both formats, and a few powers of two whose sums and products tie.
const Bits kSpecials = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x007f, 0x0080, 0x3c00, 0xbc00,
                        0x3c01, 0x3800, 0x1400, 0x6800, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
                        0xfe01, 0x3f80, 0xbf80, 0x3f81, 0x3b80, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0,
                        0x7f81, 0xffc1, 0x4b00};

// Partners for every pattern: each special alone, the pattern itself, its negation, its neighbour,
// and 128 pseudo-random permutations (odd multipliers: every pattern meets 128 others).
std::vector<Bits> partner_sets(const Bits& all) {
  std::vector<Bits> sets;
  for (std::uint16_t special : kSpecials) sets.emplace_back(kPatterns, special);
  sets.push_back(all);
  Bits negated(kPatterns), next(kPatterns);
  for (std::size_t i = 0; i < kPatterns; ++i) {
    negated[i] = static_cast<std::uint16_t>(all[i] ^ 0x8000u);
    next[i] = static_cast<std::uint16_t>(all[i] + 1u);
  }
  sets.push_back(negated);
  sets.push_back(next);
  std::uint32_t state = 12345;
  for (int pass = 0; pass < 128; ++pass) {
    state = state * 1664525u + 1013904223u;
    const std::uint32_t multiplier = state | 1u, offset = state >> 16;
    Bits permuted(kPatterns);
    for (std::size_t i = 0; i < kPatterns; ++i) permuted[i] = static_cast<std::uint16_t>(i * multiplier + offset);
    sets.push_back(std::move(permuted));
  }
  return sets;
}

// The first element where the two results differ, for the failure message; -1 when none does.
long first_difference(const Bits& vector_result, const Bits& scalar_result) {
  for (std::size_t i = 0; i < vector_result.size(); ++i)
    if (vector_result[i] != scalar_result[i]) return static_cast<long>(i);
  return -1;
}

}  // namespace

TEST_CASE("fp16 and bf16 vector kernels: bit-identical to the scalar ones for every pattern, every op") {
  if (!core::simd::available()) MESSAGE("this CPU lacks AVX2/F16C: reduce() is the scalar kernel itself");
  Bits all(kPatterns);
  for (std::size_t i = 0; i < kPatterns; ++i) all[i] = static_cast<std::uint16_t>(i);
  const auto partners = partner_sets(all);
  for (ringrun_dtype dtype : {RINGRUN_FLOAT16, RINGRUN_BFLOAT16}) {
    for (ringrun_op op : {RINGRUN_SUM, RINGRUN_AVERAGE, RINGRUN_MIN, RINGRUN_MAX, RINGRUN_PRODUCT}) {
      const std::string what = std::string(core::dtype_name(dtype)) + " " + core::op_name(op);
      CAPTURE(what);
      Bits vector_result(kPatterns), scalar_result(kPatterns);
      for (const Bits& b : partners) {
        core::reduce(vector_result.data(), all.data(), b.data(), kPatterns, dtype, op);
        core::reduce_scalar(scalar_result.data(), all.data(), b.data(), kPatterns, dtype, op);
        const long at = first_difference(vector_result, scalar_result);
        if (at >= 0) {
          FAIL_CHECK("a=", all[at], " b=", b[at], ": vector ", vector_result[at], ", scalar ", scalar_result[at]);
          break;
        }
      }
    }
  }
}

TEST_CASE("fp16 and bf16 vector average: every pattern divided by every rank count up to 17, and more") {
  for (ringrun_dtype dtype : {RINGRUN_FLOAT16, RINGRUN_BFLOAT16}) {
    for (int ranks : {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 96, 1000, 65537}) {
      const std::string type = core::dtype_name(dtype);
      CAPTURE(type);
      CAPTURE(ranks);
      Bits vector_result(kPatterns), scalar_result(kPatterns);
      for (std::size_t i = 0; i < kPatterns; ++i) vector_result[i] = scalar_result[i] = static_cast<std::uint16_t>(i);
      core::finish_average(vector_result.data(), kPatterns, dtype, ranks);
      core::finish_average_scalar(scalar_result.data(), kPatterns, dtype, ranks);
      const long at = first_difference(vector_result, scalar_result);
      if (at >= 0) FAIL_CHECK("h=", at, ": vector ", vector_result[at], ", scalar ", scalar_result[at]);
    }
  }
}

TEST_CASE("fp16 and bf16 vector kernels: unaligned, in place, every length up to 40 (vector part and tail)") {
  Bits inputs(64), partner(64);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = static_cast<std::uint16_t>(0x3c00 + 37 * i);
    partner[i] = static_cast<std::uint16_t>(0x3f80 + 91 * i);
  }
  for (ringrun_dtype dtype : {RINGRUN_FLOAT16, RINGRUN_BFLOAT16}) {
    for (std::size_t count = 0; count <= 40; ++count) {
      const std::string type = core::dtype_name(dtype);
      CAPTURE(type);
      CAPTURE(count);
      Bits vector_result = inputs, scalar_result = inputs;  // element 1 on: not 16-byte aligned
      core::reduce(vector_result.data() + 1, vector_result.data() + 1, partner.data() + 1, count, dtype, RINGRUN_SUM);
      core::reduce_scalar(scalar_result.data() + 1, scalar_result.data() + 1, partner.data() + 1, count, dtype,
                          RINGRUN_SUM);
      core::finish_average(vector_result.data() + 1, count, dtype, 3);
      core::finish_average_scalar(scalar_result.data() + 1, count, dtype, 3);
      CHECK(vector_result == scalar_result);  // nothing written outside [1, 1 + count) either
    }
  }
}

}  // namespace ringrun

namespace ringrun {

TEST_CASE("int8, int16 and bool: every op, wrapping sums, average, the boolean or/and") {
  const std::int8_t a8[] = {100, -100, 5, -7}, b8[] = {100, -100, -3, 2};
  std::int8_t out8[4];
  core::reduce(out8, a8, b8, 4, RINGRUN_INT8, RINGRUN_SUM);
  CHECK(out8[0] == static_cast<std::int8_t>(-56));  // 200 wraps
  CHECK(out8[1] == static_cast<std::int8_t>(56));
  CHECK(out8[2] == 2);
  core::reduce(out8, a8, b8, 4, RINGRUN_INT8, RINGRUN_MIN);
  CHECK(out8[3] == -7);
  core::reduce(out8, a8, b8, 4, RINGRUN_INT8, RINGRUN_PRODUCT);
  CHECK(out8[3] == -14);
  std::int8_t avg8[] = {-9, 9};
  core::finish_average(avg8, 2, RINGRUN_INT8, 2);
  CHECK(avg8[0] == -4);  // toward zero, as C++ integer division
  CHECK(avg8[1] == 4);

  const std::int16_t a16[] = {30000, -2, 7}, b16[] = {30000, 3, -9};
  std::int16_t out16[3];
  core::reduce(out16, a16, b16, 3, RINGRUN_INT16, RINGRUN_SUM);
  CHECK(out16[0] == static_cast<std::int16_t>(-5536));
  CHECK(out16[1] == 1);
  core::reduce(out16, a16, b16, 3, RINGRUN_INT16, RINGRUN_MAX);
  CHECK(out16[2] == 7);

  const std::uint8_t ta[] = {0, 0, 1, 1}, tb[] = {0, 1, 0, 1};
  std::uint8_t out[4];
  for (auto op : {RINGRUN_SUM, RINGRUN_MAX, RINGRUN_AVERAGE}) {
    core::reduce(out, ta, tb, 4, RINGRUN_BOOL, op);
    CHECK(std::vector<int>(out, out + 4) == std::vector<int>{0, 1, 1, 1});
  }
  core::finish_average(out, 4, RINGRUN_BOOL, 3);
  CHECK(std::vector<int>(out, out + 4) == std::vector<int>{0, 1, 1, 1});
  for (auto op : {RINGRUN_MIN, RINGRUN_PRODUCT}) {
    core::reduce(out, ta, tb, 4, RINGRUN_BOOL, op);
    CHECK(std::vector<int>(out, out + 4) == std::vector<int>{0, 0, 0, 1});
  }
  CHECK(core::dtype_size(RINGRUN_INT16) == 2);
  CHECK(std::string(core::dtype_name(RINGRUN_BOOL)) == "bool");
}

}  // namespace ringrun
