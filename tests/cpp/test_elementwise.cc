// 16-bit float conversions (common/half.h) and element-wise helpers (common/elementwise.h).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/cpp/test_harness.h"
#include "tfring/kernels/common/elementwise.h"
#include "tfring/kernels/common/half.h"

namespace tfring {
namespace {

float Bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

TFRING_TEST(Half, KnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
}

TFRING_TEST(Half, RoundsToNearestEven) {
  // Halfway between 1 (0x3c00, even) and 1+2^-10 (0x3c01): to the even one.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // Halfway between 0x3c01 and 0x3c02: up, to the even one.
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Just above halfway rounds up.
  EXPECT_EQ(FloatToHalf(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  // Every midpoint between adjacent finite halves (subnormals included), and its
  // neighbours, against the rule: the midpoint goes to the even one, others to the nearest.
  int wrong = 0;
  for (uint32_t h = 0; h < 0x7bff; ++h) {
    const float lo = HalfToFloat(h), hi = HalfToFloat(h + 1);
    const float mid = lo + (hi - lo) / 2;  // exact in float
    const uint16_t even = (h & 1) ? h + 1 : h;
    if (FloatToHalf(mid) != even || FloatToHalf(std::nextafter(mid, 0.0f)) != h ||
        FloatToHalf(std::nextafter(mid, 1e9f)) != h + 1 || FloatToHalf(-mid) != (even | 0x8000)) {
      if (++wrong <= 5) EXPECT_TRUE(false) << "wrong rounding between halves " << h << " and " << h + 1;
    }
  }
  EXPECT_EQ(wrong, 0);
}

TFRING_TEST(Half, Subnormals) {
  const float tiny = std::ldexp(1.0f, -24);  // the smallest subnormal half
  EXPECT_EQ(FloatToHalf(tiny), 0x0001);
  EXPECT_EQ(HalfToFloat(0x0001), tiny);
  EXPECT_EQ(HalfToFloat(0x03ff), 1023 * tiny);  // the largest subnormal
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));  // the smallest normal
  EXPECT_EQ(FloatToHalf(tiny / 2), 0x0000);  // halfway to 0: to even (zero)
  EXPECT_EQ(FloatToHalf(std::nextafter(tiny / 2, 1.0f)), 0x0001);
  EXPECT_EQ(FloatToHalf(1.5f * tiny), 0x0002);  // halfway between 1 and 2 ulps: to even
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14) - tiny / 4), 0x0400);  // rounds up into normals
  EXPECT_EQ(FloatToHalf(-tiny), 0x8001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -40)), 0x0000);
}

TFRING_TEST(Half, InfinityAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToHalf(inf), 0x7c00);
  EXPECT_EQ(FloatToHalf(-inf), 0xfc00);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // halfway past the largest half: to inf (even)
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e10f), 0x7c00);
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)) && HalfToFloat(0x7c00) > 0);
  EXPECT_TRUE(std::isinf(HalfToFloat(0xfc00)) && HalfToFloat(0xfc00) < 0);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff) != 0) << nan;
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7c01)));
  // A signalling float NaN whose payload sits only in low bits must stay a NaN.
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(Bits(0x7f800001)))));
}

TFRING_TEST(Half, EveryHalfRoundTrips) {
  int wrong = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      if (!std::isnan(HalfToFloat(FloatToHalf(f)))) ++wrong;
    } else if (FloatToHalf(f) != h) {
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0);
}

TFRING_TEST(BFloat16, RoundingAndSpecials) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie: to even
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie: to even
  EXPECT_EQ(FloatToBFloat16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past max
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(Bits(0x7f800001)))));
  EXPECT_EQ(FloatToBFloat16(Bits(0x00000001)), 0x0000);  // smallest float subnormal
  int wrong = 0;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f) ? !std::isnan(BFloat16ToFloat(FloatToBFloat16(f))) : FloatToBFloat16(f) != b) {
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0);
}

TFRING_TEST(Elementwise, DivideRoundsTowardZero) {
  std::vector<int32_t> i32 = {-7, -6, -5, -1, 0, 1, 5, 6, 7};
  DivideTowardZeroInPlace(DataType::kInt32, 3, i32.data(), i32.size());
  EXPECT_TRUE(i32 == std::vector<int32_t>({-2, -2, -1, 0, 0, 0, 1, 2, 2}));
  std::vector<int8_t> i8 = {-128, 127, -1};
  DivideTowardZeroInPlace(DataType::kInt8, 3, i8.data(), i8.size());
  EXPECT_TRUE(i8 == std::vector<int8_t>({-42, 42, 0}));
  // Exact where multiplying by 1/49 in double would give 0.99999...: 49 / 49 is 1.
  std::vector<int64_t> i64 = {-(int64_t{1} << 40) - 1, (int64_t{1} << 40) + 1, 49};
  DivideTowardZeroInPlace(DataType::kInt64, 2, i64.data(), 2);
  DivideTowardZeroInPlace(DataType::kInt64, 49, i64.data() + 2, 1);
  EXPECT_TRUE(i64 == std::vector<int64_t>({-(int64_t{1} << 39), int64_t{1} << 39, 1}));
  std::vector<uint8_t> u8 = {255, 1, 0};
  DivideTowardZeroInPlace(DataType::kUInt8, 2, u8.data(), u8.size());
  EXPECT_TRUE(u8 == std::vector<uint8_t>({127, 0, 0}));
}

TFRING_TEST(Elementwise, ScalingIntegersTruncatesTowardZero) {
  std::vector<int32_t> i32 = {-7, -1, 0, 3, 7};
  ScaleInPlace(DataType::kInt32, 0.5, i32.data(), i32.size());
  EXPECT_TRUE(i32 == std::vector<int32_t>({-3, 0, 0, 1, 3}));
  std::vector<uint16_t> u16 = {1000, 3};
  ScaleInPlace(DataType::kUInt16, 2.5, u16.data(), u16.size());
  EXPECT_TRUE(u16 == std::vector<uint16_t>({2500, 7}));
  std::vector<uint8_t> u8 = {200, 3};  // out of range: saturated, not undefined
  ScaleInPlace(DataType::kUInt8, -1.0, u8.data(), 1);
  ScaleInPlace(DataType::kUInt8, 100.0, u8.data() + 1, 1);
  EXPECT_TRUE(u8 == std::vector<uint8_t>({0, 255}));
  std::vector<int8_t> i8 = {-100, 100};  // Average over 200 ranks: the divisor fits no int8
  DivideTowardZeroInPlace(DataType::kInt8, 200, i8.data(), i8.size());
  EXPECT_TRUE(i8 == std::vector<int8_t>({0, 0}));
}

// ScaleInto runs float and double in blocks of 8 (for the vectorizer) and the rest one by
// one, and float in float when the factor is a float: every length around the block, in
// place and not, factors that are floats and one that is not (1/3 rounds differently in
// float), values that overflow and underflow, must give what a plain loop in double gives,
// bit for bit.
TFRING_TEST(Elementwise, ScaleIntoMatchesAPlainLoopInDouble) {
  const float specials[] = {3e38f, -3e38f, 1e-40f, -1e-45f, 0.0f, -0.0f, 1.0f + 1e-7f};
  for (double factor : {1.0 / 3, 0.5, 0.125, 3.0, 1e-3}) {
    for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 100}) {
      std::vector<float> in(n), out(n, -1.0f), in_place(n);
      std::vector<double> in64(n), out64(n);
      for (int64_t i = 0; i < n; ++i) {
        in[i] = i % 3 == 0 ? specials[(i / 3) % 7] : static_cast<float>(0.1 * (i + 1) - 3.7);
        in64[i] = 1e300 / (i + 1);
      }
      in_place = in;
      ScaleInto(DataType::kFloat32, factor, in.data(), out.data(), n);
      ScaleInPlace(DataType::kFloat32, factor, in_place.data(), n);
      ScaleInto(DataType::kFloat64, factor, in64.data(), out64.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float want = static_cast<float>(static_cast<double>(in[i]) * factor);
        EXPECT_EQ(std::memcmp(&out[i], &want, sizeof(float)), 0)
            << "factor " << factor << ", element " << i << " of " << n << ": " << out[i]
            << " instead of " << want;
        EXPECT_EQ(std::memcmp(&in_place[i], &want, sizeof(float)), 0);
        EXPECT_EQ(out64[i], in64[i] * factor);
      }
    }
  }
  std::vector<int32_t> from = {-7, 7}, to = {0, 0};  // integers: out of place as well
  ScaleInto(DataType::kInt32, 0.5, from.data(), to.data(), 2);
  EXPECT_TRUE(to == std::vector<int32_t>({-3, 3}));
  EXPECT_TRUE(from == std::vector<int32_t>({-7, 7}));
}

TFRING_TEST(Elementwise, ReduceIntoAndScale) {
  std::vector<float> a = {1, -2, 3}, b = {4, 5, -6};
  ReduceInto(DataType::kFloat32, ReduceOp::kMax, a.data(), b.data(), 3);
  EXPECT_TRUE(b == std::vector<float>({4, 5, 3}));
  ReduceInto(DataType::kFloat32, ReduceOp::kProduct, a.data(), b.data(), 3);
  EXPECT_TRUE(b == std::vector<float>({4, -10, 9}));
  std::vector<uint16_t> h = {FloatToHalf(1.5f), FloatToHalf(-2.0f)};
  std::vector<uint16_t> k = {FloatToHalf(0.25f), FloatToHalf(-3.0f)};
  ReduceInto(DataType::kFloat16, ReduceOp::kSum, h.data(), k.data(), 2);
  EXPECT_EQ(HalfToFloat(k[0]), 1.75f);
  EXPECT_EQ(HalfToFloat(k[1]), -5.0f);
  ReduceInto(DataType::kFloat16, ReduceOp::kMin, h.data(), k.data(), 2);
  EXPECT_EQ(HalfToFloat(k[1]), -5.0f);
  ScaleInPlace(DataType::kFloat16, 0.5, k.data(), 2);
  EXPECT_EQ(HalfToFloat(k[0]), 0.75f);  // min(1.5, 1.75) * 0.5
  std::vector<uint16_t> bf = {FloatToBFloat16(3.0f)};
  ScaleInPlace(DataType::kBFloat16, 1.0 / 3, bf.data(), 1);
  EXPECT_EQ(BFloat16ToFloat(bf[0]), 1.0f);
  std::vector<int8_t> x = {100, -100}, y = {100, -100};
  ReduceInto(DataType::kInt8, ReduceOp::kSum, x.data(), y.data(), 2);  // wraps, as int8 does
  EXPECT_TRUE(y == std::vector<int8_t>({-56, 56}));
}

// Integer sums and products wrap modulo 2^bits at every width, as TensorFlow's do (and
// without undefined behaviour: the sanitizer build runs this too).
TFRING_TEST(Elementwise, IntegerSumsAndProductsWrap) {
  std::vector<uint8_t> u8 = {200, 16}, v8 = {100, 17};
  ReduceInto(DataType::kUInt8, ReduceOp::kSum, u8.data(), v8.data(), 2);
  EXPECT_TRUE(v8 == std::vector<uint8_t>({44, 33}));
  ReduceInto(DataType::kUInt8, ReduceOp::kProduct, u8.data(), v8.data(), 2);
  EXPECT_TRUE(v8 == std::vector<uint8_t>({(200 * 44) % 256, (16 * 33) % 256}));
  std::vector<uint16_t> u16 = {65535, 40000}, v16 = {65535, 40000};
  ReduceInto(DataType::kUInt16, ReduceOp::kProduct, u16.data(), v16.data(), 2);
  EXPECT_EQ(v16[0], 1);  // (2^16 - 1)^2 mod 2^16; as int, 65535 * 65535 would overflow
  EXPECT_EQ(v16[1], static_cast<uint16_t>((40000ull * 40000ull) % 65536));
  std::vector<int16_t> s16 = {30000, -30000}, t16 = {30000, -30000};
  ReduceInto(DataType::kInt16, ReduceOp::kSum, s16.data(), t16.data(), 2);
  EXPECT_TRUE(t16 == std::vector<int16_t>({-5536, 5536}));
  std::vector<int32_t> s32 = {INT32_MAX, INT32_MIN}, t32 = {1, -1};
  ReduceInto(DataType::kInt32, ReduceOp::kSum, s32.data(), t32.data(), 2);
  EXPECT_TRUE(t32 == std::vector<int32_t>({INT32_MIN, INT32_MAX}));
  std::vector<int64_t> s64 = {INT64_MAX, int64_t{1} << 62}, t64 = {2, 4};
  ReduceInto(DataType::kInt64, ReduceOp::kSum, s64.data(), t64.data(), 1);
  EXPECT_EQ(t64[0], INT64_MIN + 1);
  ReduceInto(DataType::kInt64, ReduceOp::kProduct, s64.data() + 1, t64.data() + 1, 1);
  EXPECT_EQ(t64[1], 0);  // 2^64 mod 2^64
  // Min and Max compare as signed (or unsigned) values, never as bytes.
  std::vector<int8_t> m = {-128, 127}, n = {127, -128};
  ReduceInto(DataType::kInt8, ReduceOp::kMin, m.data(), n.data(), 2);
  EXPECT_TRUE(n == std::vector<int8_t>({-128, -128}));
}

}  // namespace
}  // namespace tfring
