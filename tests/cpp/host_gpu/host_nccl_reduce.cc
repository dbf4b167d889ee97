// The host GPU's reductions (host_nccl_reduce.h).
#include "tests/cpp/host_gpu/host_nccl_reduce.h"

#include <algorithm>
#include <type_traits>

#include "tfring/kernels/common/half.h"

namespace host_gpu {
namespace {

template <typename T>
T Combine(T a, T b, int op) {
  // Integers in their unsigned type, so that sums and products wrap (as on a GPU) without
  // undefined behaviour.
  using U = typename std::conditional<std::is_integral<T>::value, std::make_unsigned<T>,
                                      std::common_type<T>>::type::type;
  switch (op) {
    case ncclProd: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    case ncclMax: return std::max(a, b);
    case ncclMin: return std::min(a, b);
    default: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));  // sum, avg, premulsum
  }
}

template <typename T>
void CombineInto(void* acc, const void* in, size_t n, int op, double scale, bool first) {
  T* a = static_cast<T*>(acc);
  const T* b = static_cast<const T*>(in);
  for (size_t i = 0; i < n; ++i) {
    T x = b[i];
    if (op == kPreMulSum) x = static_cast<T>(x * scale);
    a[i] = first ? x : Combine(a[i], x, op);
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void Combine16Into(void* acc, const void* in, size_t n, int op, double scale, bool first) {
  uint16_t* a = static_cast<uint16_t*>(acc);
  const uint16_t* b = static_cast<const uint16_t*>(in);
  for (size_t i = 0; i < n; ++i) {
    float x = ToFloat(b[i]);
    if (op == kPreMulSum) x = ToFloat(FromFloat(static_cast<float>(x * scale)));
    a[i] = FromFloat(first ? x : Combine(ToFloat(a[i]), x, op));
  }
}

}  // namespace

size_t TypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;  // the 8-bit floats: not emulated
  }
}

// acc (op)= in, elementwise; `first`: acc = in (scaled, for PreMulSum).
void Accumulate(void* acc, const void* in, size_t n, ncclDataType_t t, int op, double scale,
                bool first) {
  switch (t) {
    case ncclInt8: return CombineInto<int8_t>(acc, in, n, op, scale, first);
    case ncclUint8: return CombineInto<uint8_t>(acc, in, n, op, scale, first);
    case ncclInt32: return CombineInto<int32_t>(acc, in, n, op, scale, first);
    case ncclUint32: return CombineInto<uint32_t>(acc, in, n, op, scale, first);
    case ncclInt64: return CombineInto<int64_t>(acc, in, n, op, scale, first);
    case ncclUint64: return CombineInto<uint64_t>(acc, in, n, op, scale, first);
    case ncclFloat32: return CombineInto<float>(acc, in, n, op, scale, first);
    case ncclFloat64: return CombineInto<double>(acc, in, n, op, scale, first);
    case ncclFloat16:
      return Combine16Into<tfring::HalfToFloat, tfring::FloatToHalf>(acc, in, n, op, scale, first);
    case ncclBfloat16:
      return Combine16Into<tfring::BFloat16ToFloat, tfring::FloatToBFloat16>(acc, in, n, op, scale,
                                                                           first);
    default: return;
  }
}

// ncclAvg: the sum divided by the number of ranks (integers toward zero).
void DivideBy(void* acc, size_t n, ncclDataType_t t, int size) {
  auto divide = [&](auto* p) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::remove_reference_t<decltype(*p)>>(p[i] / size);
  };
  switch (t) {
    case ncclInt8: return divide(static_cast<int8_t*>(acc));
    case ncclUint8: return divide(static_cast<uint8_t*>(acc));
    case ncclInt32: return divide(static_cast<int32_t*>(acc));
    case ncclUint32: return divide(static_cast<uint32_t*>(acc));
    case ncclInt64: return divide(static_cast<int64_t*>(acc));
    case ncclUint64: return divide(static_cast<uint64_t*>(acc));
    case ncclFloat32: return divide(static_cast<float*>(acc));
    case ncclFloat64: return divide(static_cast<double*>(acc));
    case ncclFloat16: case ncclBfloat16: {
      const bool half = t == ncclFloat16;
      uint16_t* p = static_cast<uint16_t*>(acc);
      for (size_t i = 0; i < n; ++i) {
        const float v = (half ? tfring::HalfToFloat(p[i]) : tfring::BFloat16ToFloat(p[i])) / size;
        p[i] = half ? tfring::FloatToHalf(v) : tfring::FloatToBFloat16(v);
      }
      return;
    }
    default: return;
  }
}

}  // namespace host_gpu
