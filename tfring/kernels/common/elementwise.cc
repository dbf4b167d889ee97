#include "tfring/kernels/common/elementwise.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "tfring/kernels/common/half.h"
#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace {

// Integer sums and products wrap modulo 2^bits, as TensorFlow's own integer arithmetic
// does: computed in the unsigned type of T's width (at least unsigned int, so that uint16 *
// uint16 is not promoted to a signed int that overflows), where overflow is defined, then
// converted back (modular since C++20, and in every compiler tfring builds with before).
template <typename T>
T WrappingSum(T a, T b) {
  using U = std::common_type_t<std::make_unsigned_t<T>, unsigned>;
  return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
}

template <typename T>
T WrappingProduct(T a, T b) {
  using U = std::common_type_t<std::make_unsigned_t<T>, unsigned>;
  return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
}

template <typename T>
T Combine(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      if constexpr (std::is_integral_v<T>) return WrappingSum(a, b);
      return static_cast<T>(a + b);
    case ReduceOp::kMin: return std::min(a, b);
    case ReduceOp::kMax: return std::max(a, b);
    case ReduceOp::kProduct:
      if constexpr (std::is_integral_v<T>) return WrappingProduct(a, b);
      return static_cast<T>(a * b);
  }
  return a;
}

template <typename T>
void ReduceTyped(ReduceOp op, const void* in, void* inout, int64_t count) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int64_t i = 0; i < count; ++i) b[i] = Combine<T>(op, b[i], a[i]);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void Reduce16(ReduceOp op, const void* in, void* inout, int64_t count) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int64_t i = 0; i < count; ++i) {
    b[i] = FromFloat(Combine<float>(op, ToFloat(b[i]), ToFloat(a[i])));
  }
}

// out[i] = in[i] * factor computed in W, for floating-point T. In blocks of 8 read whole
// before any is written, so that -O2's SLP vectorizer turns each into packed multiplies
// with no overlap check between `in` and `out` (the plain loop stays scalar at -O2, and
// Average scales every gradient; docs/benchmarks-older.md has the figures).
template <typename W, typename T>
void ScaleInBlocks(W factor, const T* in, T* out, int64_t count) {
  constexpr int kBlock = 8;
  int64_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    W v[kBlock];
    for (int j = 0; j < kBlock; ++j) v[j] = in[i + j];
    for (int j = 0; j < kBlock; ++j) out[i + j] = static_cast<T>(v[j] * factor);
  }
  for (; i < count; ++i) out[i] = static_cast<T>(static_cast<W>(in[i]) * factor);
}

// out[i] = in[i] * factor; `in` may be `out`.
template <typename T>
void ScaleTyped(double factor, const void* in_buf, void* out_buf, int64_t count) {
  const T* in = static_cast<const T*>(in_buf);
  T* out = static_cast<T*>(out_buf);
  if constexpr (std::is_integral_v<T>) {
    // Truncated toward zero, as Horovod; saturated, since a value out of T's range would be
    // undefined behaviour to convert.
    const double lo = static_cast<double>(std::numeric_limits<T>::lowest());
    const double hi = static_cast<double>(std::numeric_limits<T>::max());
    for (int64_t i = 0; i < count; ++i) {
      const double v = std::trunc(static_cast<double>(in[i]) * factor);
      out[i] = v <= lo ? std::numeric_limits<T>::lowest()
                       : v >= hi ? std::numeric_limits<T>::max() : static_cast<T>(v);
    }
  } else {
    if constexpr (std::is_same_v<T, float>) {
      // A factor that is a float (an Average over 2, 4, 8 ... ranks): the product of two
      // floats is exact in double, so rounding it to float once is what float's own
      // multiply gives, bit for bit, and it skips the conversions to and from double.
      if (static_cast<double>(static_cast<float>(factor)) == factor) {
        return ScaleInBlocks(static_cast<float>(factor), in, out, count);
      }
    }
    ScaleInBlocks(factor, in, out, count);  // in double, as Horovod scales
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void Scale16(double factor, const void* in_buf, void* out_buf, int64_t count) {
  const uint16_t* in = static_cast<const uint16_t*>(in_buf);
  uint16_t* out = static_cast<uint16_t*>(out_buf);
  const float f = static_cast<float>(factor);
  for (int64_t i = 0; i < count; ++i) out[i] = FromFloat(ToFloat(in[i]) * f);
}

template <typename T>
void DivideTyped(int64_t divisor, void* buf, int64_t count) {
  T* p = static_cast<T*>(buf);
  // In int64: a divisor (a number of ranks) need not fit in T (int8 and 128 ranks).
  for (int64_t i = 0; i < count; ++i) {
    p[i] = static_cast<T>(static_cast<int64_t>(p[i]) / divisor);  // C++: toward zero
  }
}

template <typename T>
T IdentityOf(ReduceOp op) {
  using L = std::numeric_limits<T>;
  switch (op) {
    case ReduceOp::kProduct: return T(1);
    case ReduceOp::kMin: return L::has_infinity ? L::infinity() : L::max();
    case ReduceOp::kMax: return L::has_infinity ? -L::infinity() : L::lowest();
    default: return T(0);
  }
}

template <typename T>
void FillTyped(T value, void* buf, int64_t count) {
  std::fill(static_cast<T*>(buf), static_cast<T*>(buf) + count, value);
}

}  // namespace

void FillIdentity(DataType dtype, ReduceOp op, void* buf, int64_t count) {
  switch (dtype) {
    case DataType::kUInt8: return FillTyped(IdentityOf<uint8_t>(op), buf, count);
    case DataType::kInt8: return FillTyped(IdentityOf<int8_t>(op), buf, count);
    case DataType::kInt32: return FillTyped(IdentityOf<int32_t>(op), buf, count);
    case DataType::kInt64: return FillTyped(IdentityOf<int64_t>(op), buf, count);
    case DataType::kFloat32: return FillTyped(IdentityOf<float>(op), buf, count);
    case DataType::kFloat64: return FillTyped(IdentityOf<double>(op), buf, count);
    case DataType::kFloat16:
      return FillTyped(FloatToHalf(IdentityOf<float>(op)), buf, count);
    case DataType::kBFloat16:
      return FillTyped(FloatToBFloat16(IdentityOf<float>(op)), buf, count);
    case DataType::kBool: return FillTyped<uint8_t>(0, buf, count);
    case DataType::kUInt16: return FillTyped(IdentityOf<uint16_t>(op), buf, count);
    case DataType::kInt16: return FillTyped(IdentityOf<int16_t>(op), buf, count);
  }
}

void ReduceInto(DataType dtype, ReduceOp op, const void* in, void* inout, int64_t count) {
  switch (dtype) {
    case DataType::kUInt8: return ReduceTyped<uint8_t>(op, in, inout, count);
    case DataType::kInt8: return ReduceTyped<int8_t>(op, in, inout, count);
    case DataType::kUInt16: return ReduceTyped<uint16_t>(op, in, inout, count);
    case DataType::kInt16: return ReduceTyped<int16_t>(op, in, inout, count);
    case DataType::kInt32: return ReduceTyped<int32_t>(op, in, inout, count);
    case DataType::kInt64: return ReduceTyped<int64_t>(op, in, inout, count);
    case DataType::kFloat32: return ReduceTyped<float>(op, in, inout, count);
    case DataType::kFloat64: return ReduceTyped<double>(op, in, inout, count);
    case DataType::kFloat16: return Reduce16<HalfToFloat, FloatToHalf>(op, in, inout, count);
    case DataType::kBFloat16:
      return Reduce16<BFloat16ToFloat, FloatToBFloat16>(op, in, inout, count);
    case DataType::kBool: break;
  }
  TFRING_CHECK(false) << "ReduceInto on non-reducible dtype " << DataTypeName(dtype);
}

void ScaleInto(DataType dtype, double factor, const void* in, void* out, int64_t count) {
  switch (dtype) {
    case DataType::kFloat32: return ScaleTyped<float>(factor, in, out, count);
    case DataType::kFloat64: return ScaleTyped<double>(factor, in, out, count);
    case DataType::kFloat16: return Scale16<HalfToFloat, FloatToHalf>(factor, in, out, count);
    case DataType::kBFloat16:
      return Scale16<BFloat16ToFloat, FloatToBFloat16>(factor, in, out, count);
    case DataType::kUInt8: return ScaleTyped<uint8_t>(factor, in, out, count);
    case DataType::kInt8: return ScaleTyped<int8_t>(factor, in, out, count);
    case DataType::kUInt16: return ScaleTyped<uint16_t>(factor, in, out, count);
    case DataType::kInt16: return ScaleTyped<int16_t>(factor, in, out, count);
    case DataType::kInt32: return ScaleTyped<int32_t>(factor, in, out, count);
    case DataType::kInt64: return ScaleTyped<int64_t>(factor, in, out, count);
    case DataType::kBool: break;
  }
  TFRING_CHECK(false) << "ScaleInto on non-reducible dtype " << DataTypeName(dtype);
}

void ScaleInPlace(DataType dtype, double factor, void* buf, int64_t count) {
  ScaleInto(dtype, factor, buf, buf, count);
}

void DivideTowardZeroInPlace(DataType dtype, int64_t divisor, void* buf, int64_t count) {
  switch (dtype) {
    case DataType::kUInt8: return DivideTyped<uint8_t>(divisor, buf, count);
    case DataType::kInt8: return DivideTyped<int8_t>(divisor, buf, count);
    case DataType::kUInt16: return DivideTyped<uint16_t>(divisor, buf, count);
    case DataType::kInt16: return DivideTyped<int16_t>(divisor, buf, count);
    case DataType::kInt32: return DivideTyped<int32_t>(divisor, buf, count);
    case DataType::kInt64: return DivideTyped<int64_t>(divisor, buf, count);
    default: break;
  }
  TFRING_CHECK(false) << "DivideTowardZeroInPlace on non-integer dtype " << DataTypeName(dtype);
}

}  // namespace tfring
