#include "tests/cpp/collective_util.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

#include "tests/cpp/test_harness.h"
#include "tfring/kernels/common/half.h"
#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace testing {
namespace {

template <typename T>
void Put(std::vector<char>* out, size_t i, T v) {
  std::memcpy(out->data() + i * sizeof(T), &v, sizeof(T));
}

template <typename T>
T Get(const std::vector<char>& in, size_t i) {
  T v;
  std::memcpy(&v, in.data() + i * sizeof(T), sizeof(T));
  return v;
}

bool IsSigned(DataType dtype) {
  return dtype != DataType::kUInt8 && dtype != DataType::kUInt16 && dtype != DataType::kBool;
}

double Tolerance(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return 2e-3;
    case DataType::kBFloat16: return 1.6e-2;
    case DataType::kFloat32: return 1e-6;
    case DataType::kFloat64: return 1e-12;
    default: return 0;
  }
}

OpPtr NewOp(const std::string& name, DataType dtype, const Shape& shape,
            std::vector<char> input, Placement where, Entry* e) {
  auto op = std::make_shared<Op>();
  op->name = name;
  op->dtype = dtype;
  op->input = std::move(input);
  e->request.key.name = name;
  e->request.dtype = dtype;
  e->request.shape = shape;
  e->input = op->input.data();
  e->device = where.device;
  e->request.on_device = where.device != kHostMemory;
  e->ready_event = where.ready_event;
  // The done callback owns the Op: its buffers live until the coordinator is finished.
  e->done = [op](const Status& s) { op->promise.set_value(s); };
  return op;
}

}  // namespace

std::vector<char> Encode(DataType dtype, const std::vector<double>& values) {
  std::vector<char> out(values.size() * DataTypeSize(dtype) + 1);  // +1: never a null data()
  out.resize(values.size() * DataTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    switch (dtype) {
      case DataType::kUInt8: Put<uint8_t>(&out, i, static_cast<uint8_t>(v)); break;
      case DataType::kInt8: Put<int8_t>(&out, i, static_cast<int8_t>(v)); break;
      case DataType::kInt32: Put<int32_t>(&out, i, static_cast<int32_t>(v)); break;
      case DataType::kInt64: Put<int64_t>(&out, i, static_cast<int64_t>(v)); break;
      case DataType::kFloat16: Put<uint16_t>(&out, i, FloatToHalf(static_cast<float>(v))); break;
      case DataType::kBFloat16:
        Put<uint16_t>(&out, i, FloatToBFloat16(static_cast<float>(v)));
        break;
      case DataType::kFloat32: Put<float>(&out, i, static_cast<float>(v)); break;
      case DataType::kFloat64: Put<double>(&out, i, v); break;
      case DataType::kBool: Put<uint8_t>(&out, i, v != 0); break;
      case DataType::kUInt16: Put<uint16_t>(&out, i, static_cast<uint16_t>(v)); break;
      case DataType::kInt16: Put<int16_t>(&out, i, static_cast<int16_t>(v)); break;
    }
  }
  return out;
}

std::vector<double> Decode(DataType dtype, const std::vector<char>& bytes) {
  const size_t n = bytes.size() / DataTypeSize(dtype);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DataType::kUInt8: out[i] = Get<uint8_t>(bytes, i); break;
      case DataType::kInt8: out[i] = Get<int8_t>(bytes, i); break;
      case DataType::kInt32: out[i] = Get<int32_t>(bytes, i); break;
      case DataType::kInt64: out[i] = static_cast<double>(Get<int64_t>(bytes, i)); break;
      case DataType::kFloat16: out[i] = HalfToFloat(Get<uint16_t>(bytes, i)); break;
      case DataType::kBFloat16: out[i] = BFloat16ToFloat(Get<uint16_t>(bytes, i)); break;
      case DataType::kFloat32: out[i] = Get<float>(bytes, i); break;
      case DataType::kFloat64: out[i] = Get<double>(bytes, i); break;
      case DataType::kBool: out[i] = Get<uint8_t>(bytes, i); break;
      case DataType::kUInt16: out[i] = Get<uint16_t>(bytes, i); break;
      case DataType::kInt16: out[i] = Get<int16_t>(bytes, i); break;
    }
  }
  return out;
}

double TestValue(DataType dtype, int rank, int64_t i, int salt) {
  const int64_t k = rank * 7 + i * 3 + salt * 5;
  if (!IsSigned(dtype)) return static_cast<double>(k % 5 + 1);  // 1..5
  const double v = static_cast<double>(k % 9 - 4);               // -4..4
  return IsFloatingPoint(dtype) ? v * 0.5 : v;
}

std::vector<double> TestValues(DataType dtype, int rank, int64_t count, int salt) {
  std::vector<double> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = TestValue(dtype, rank, i, salt);
  return v;
}

int64_t OverflowTestInt(DataType dtype, int rank, int64_t i) {
  const int bits = static_cast<int>(DataTypeSize(dtype)) * 8;
  const int64_t k = (rank * 5 + i * 3) % 7;  // 0..6
  // Signed types: every fourth pair of elements negative on every rank, so that negative
  // sums and products overflow too.
  const int64_t sign = IsSigned(dtype) && i % 4 >= 2 ? -1 : 1;
  if (i % 2 == 0) {
    // Three quarters of the type's largest value: a sum of two overflows.
    return sign * ((int64_t{3} << (bits - (IsSigned(dtype) ? 3 : 2))) + k);
  }
  // About the square root of the type's range: a product of two overflows.
  return sign * ((int64_t{1} << (bits / 2)) + k);
}

std::vector<int64_t> OverflowTestInts(DataType dtype, int rank, int64_t count) {
  std::vector<int64_t> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = OverflowTestInt(dtype, rank, i);
  return v;
}

std::vector<char> EncodeInts(DataType dtype, const std::vector<int64_t>& values) {
  std::vector<char> out(values.size() * DataTypeSize(dtype) + 1);  // +1: never a null data()
  out.resize(values.size() * DataTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t v = values[i];
    switch (dtype) {
      case DataType::kUInt8: Put<uint8_t>(&out, i, static_cast<uint8_t>(v)); break;
      case DataType::kInt8: Put<int8_t>(&out, i, static_cast<int8_t>(v)); break;
      case DataType::kUInt16: Put<uint16_t>(&out, i, static_cast<uint16_t>(v)); break;
      case DataType::kInt16: Put<int16_t>(&out, i, static_cast<int16_t>(v)); break;
      case DataType::kInt32: Put<int32_t>(&out, i, static_cast<int32_t>(v)); break;
      case DataType::kInt64: Put<int64_t>(&out, i, v); break;
      default: TFRING_CHECK(false) << "EncodeInts of " << DataTypeName(dtype);
    }
  }
  return out;
}

std::vector<int64_t> DecodeInts(DataType dtype, const std::vector<char>& bytes) {
  const size_t n = bytes.size() / DataTypeSize(dtype);
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DataType::kUInt8: out[i] = Get<uint8_t>(bytes, i); break;
      case DataType::kInt8: out[i] = Get<int8_t>(bytes, i); break;
      case DataType::kUInt16: out[i] = Get<uint16_t>(bytes, i); break;
      case DataType::kInt16: out[i] = Get<int16_t>(bytes, i); break;
      case DataType::kInt32: out[i] = Get<int32_t>(bytes, i); break;
      case DataType::kInt64: out[i] = Get<int64_t>(bytes, i); break;
      default: TFRING_CHECK(false) << "DecodeInts of " << DataTypeName(dtype);
    }
  }
  return out;
}

namespace {

// `v` (an integer value held in uint64, modulo 2^64) as `dtype` holds it: its low bits, read
// as signed where the type is. (Every integer dtype fits in int64.)
int64_t WrapTo(DataType dtype, uint64_t v) {
  const int bits = static_cast<int>(DataTypeSize(dtype)) * 8;
  if (bits == 64) return static_cast<int64_t>(v);
  v &= (uint64_t{1} << bits) - 1;
  if (IsSigned(dtype) && (v >> (bits - 1)) != 0) {
    return static_cast<int64_t>(v) - (int64_t{1} << bits);
  }
  return static_cast<int64_t>(v);
}

}  // namespace

std::vector<double> ExpectedAllreduceOf(DataType dtype, ReduceOp op, int size, int64_t count,
                                        const std::function<double(int, int64_t)>& value) {
  if (!IsFloatingPoint(dtype)) {
    const std::vector<int64_t> ints = ExpectedIntAllreduceOf(
        dtype, op, size, count,
        [&value](int rank, int64_t i) { return static_cast<int64_t>(value(rank, i)); });
    return std::vector<double>(ints.begin(), ints.end());
  }
  std::vector<double> out(count);
  for (int64_t i = 0; i < count; ++i) {
    double acc = value(0, i);
    for (int r = 1; r < size; ++r) {
      const double v = value(r, i);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAverage: acc += v; break;
        case ReduceOp::kMin: acc = std::min(acc, v); break;
        case ReduceOp::kMax: acc = std::max(acc, v); break;
        case ReduceOp::kProduct: acc *= v; break;
      }
    }
    out[i] = op == ReduceOp::kAverage ? acc / size : acc;
  }
  return out;
}

std::vector<int64_t> ExpectedIntAllreduceOf(DataType dtype, ReduceOp op, int size,
                                            int64_t count,
                                            const std::function<int64_t(int, int64_t)>& value) {
  std::vector<int64_t> out(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t extreme = value(0, i);
    // Sums and products in uint64, which wraps modulo 2^64 and so modulo 2^bits.
    uint64_t wrapped = static_cast<uint64_t>(extreme);
    for (int r = 1; r < size; ++r) {
      const int64_t v = value(r, i);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAverage: wrapped += static_cast<uint64_t>(v); break;
        case ReduceOp::kMin: extreme = std::min(extreme, v); break;
        case ReduceOp::kMax: extreme = std::max(extreme, v); break;
        case ReduceOp::kProduct: wrapped *= static_cast<uint64_t>(v); break;
      }
    }
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
      out[i] = extreme;
    } else {
      const int64_t held = WrapTo(dtype, wrapped);
      out[i] = op == ReduceOp::kAverage ? held / size : held;  // toward zero, as tfring's
    }
  }
  return out;
}

std::vector<double> ExpectedAllreduce(DataType dtype, ReduceOp op, int size, int64_t count,
                                      int salt) {
  return ExpectedAllreduceOf(dtype, op, size, count, [dtype, salt](int rank, int64_t i) {
    return TestValue(dtype, rank, i, salt);
  });
}

bool AllClose(DataType dtype, const std::vector<double>& got, const std::vector<double>& want,
              std::string* why) {
  if (got.size() != want.size()) {
    *why = "got " + std::to_string(got.size()) + " elements, want " + std::to_string(want.size());
    return false;
  }
  const double tol = Tolerance(dtype);
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tol * std::max(1.0, std::fabs(want[i]))) {
      std::ostringstream os;
      os << DataTypeName(dtype) << " element " << i << ": got " << got[i] << ", want " << want[i];
      *why = os.str();
      return false;
    }
  }
  return true;
}

OpPtr SubmitAllreduce(Coordinator* c, const std::string& name, DataType dtype, const Shape& shape,
                      const std::vector<double>& values, ReduceOp op, Placement where) {
  return SubmitAllreduce([c](Entry e) { c->Enqueue(std::move(e)); }, name, dtype, shape, values,
                         op, where);
}

OpPtr SubmitAllreduce(const EnqueueFn& enqueue, const std::string& name, DataType dtype,
                      const Shape& shape, const std::vector<double>& values, ReduceOp op,
                      Placement where) {
  return SubmitAllreduceOfBytes(enqueue, name, dtype, shape, Encode(dtype, values), op, where);
}

OpPtr SubmitAllreduceOfBytes(const EnqueueFn& enqueue, const std::string& name, DataType dtype,
                             const Shape& shape, std::vector<char> input, ReduceOp op,
                             Placement where) {
  Entry e;
  OpPtr p = NewOp(name, dtype, shape, std::move(input), where, &e);
  e.request.kind = CollectiveKind::kAllreduce;
  e.request.reduce_op = op;
  p->output.reserve(p->input.size() + 1);  // never a null data(), as a framework's buffer
  p->output.resize(p->input.size());
  p->output_shape = shape;
  e.output = p->output.data();
  enqueue(std::move(e));
  return p;
}

OpPtr SubmitAllgather(Coordinator* c, const std::string& name, DataType dtype, const Shape& shape,
                      const std::vector<double>& values, Placement where,
                      const std::string& allocation_error) {
  Entry e;
  OpPtr p = NewOp(name, dtype, shape, Encode(dtype, values), where, &e);
  e.request.kind = CollectiveKind::kAllgather;
  Op* raw = p.get();  // the done callback keeps it alive
  e.allocate_output = [raw, dtype, allocation_error](const Shape& s, void** buffer) {
    if (!allocation_error.empty()) return Status::Internal(allocation_error);
    raw->output_shape = s;
    raw->output.resize(NumElements(s) * DataTypeSize(dtype) + 1);  // +1: never a null data()
    *buffer = raw->output.data();
    raw->output.resize(NumElements(s) * DataTypeSize(dtype));
    return Status::OK();
  };
  c->Enqueue(std::move(e));
  return p;
}

OpPtr SubmitBroadcast(Coordinator* c, const std::string& name, DataType dtype, const Shape& shape,
                      const std::vector<double>& values, int root, Placement where) {
  Entry e;
  OpPtr p = NewOp(name, dtype, shape, Encode(dtype, values), where, &e);
  e.request.kind = CollectiveKind::kBroadcast;
  e.request.root_rank = root;
  p->output.reserve(p->input.size() + 1);  // never a null data(), as a framework's buffer
  p->output.resize(p->input.size());
  p->output_shape = shape;
  e.output = p->output.data();
  c->Enqueue(std::move(e));
  return p;
}

Status WaitFor(const OpPtr& op, double seconds) {
  if (op->status.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    return Status::DeadlineExceeded("op '" + op->name + "' did not finish within " +
                                    std::to_string(seconds) + " s");
  }
  return op->status.get();
}

void ExpectAllreduced(const OpPtr& op, ReduceOp reduce, int size, int salt) {
  const Status s = WaitFor(op);
  ASSERT_TRUE(s.ok()) << op->name << " at size " << size << ": " << s.ToString();
  const int64_t count = static_cast<int64_t>(op->input.size() / DataTypeSize(op->dtype));
  std::string why;
  EXPECT_TRUE(AllClose(op->dtype, op->Result(),
                       ExpectedAllreduce(op->dtype, reduce, size, count, salt), &why))
      << op->name << " " << ReduceOpName(reduce) << " at size " << size << ": " << why;
}

void ExpectFailure(const OpPtr& op, StatusCode code, const std::string& needle) {
  const Status s = WaitFor(op);
  ASSERT_TRUE(!s.ok()) << op->name << " succeeded but should have failed with: " << needle;
  EXPECT_EQ(StatusCodeName(s.code()), std::string(StatusCodeName(code))) << s.message();
  EXPECT_CONTAINS(s.message(), needle);
}

}  // namespace testing
}  // namespace tfring
