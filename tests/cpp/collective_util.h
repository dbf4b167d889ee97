// Helpers shared by the coordinator tests (in-process and MPI): typed test values, ops
// submitted to a Coordinator as Entries, and waits with a deadline.
//
// Every rank computes the expected global result itself (ExpectedAllreduce etc.), from the
// same value formula the ranks used to fill their inputs (TestValue).
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "tfring/kernels/common/status.h"
#include "tfring/kernels/common/types.h"
#include "tfring/kernels/core/coordinator.h"

namespace tfring {
namespace testing {

// Every dtype that can be reduced, and every reduce op.
inline constexpr DataType kAllDtypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
                                          DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                                          DataType::kFloat32, DataType::kFloat64};
// The host path also reduces 16-bit integers (NCCL has none, so GPU tests leave them out).
inline constexpr DataType kHostDtypes[] = {
    DataType::kUInt8,   DataType::kInt8,     DataType::kUInt16,  DataType::kInt16,
    DataType::kInt32,   DataType::kInt64,    DataType::kFloat16, DataType::kBFloat16,
    DataType::kFloat32, DataType::kFloat64};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin,
                                       ReduceOp::kMax, ReduceOp::kProduct};

// Bytes of `values` as `dtype` (floats rounded to nearest even for 16-bit types).
std::vector<char> Encode(DataType dtype, const std::vector<double>& values);
std::vector<double> Decode(DataType dtype, const std::vector<char>& bytes);

// Element i of rank `rank`'s input for a test tensor: small values whose sums and products
// are exact in every dtype (signed types and floats include negatives; `salt` varies them
// per tensor).
double TestValue(DataType dtype, int rank, int64_t i, int salt = 0);
std::vector<double> TestValues(DataType dtype, int rank, int64_t count, int salt = 0);

// Element i of rank `rank`'s input for an integer dtype, chosen so that sums and products
// of two or more ranks overflow the dtype; integers, so int64's are exact too.
int64_t OverflowTestInt(DataType dtype, int rank, int64_t i);
std::vector<int64_t> OverflowTestInts(DataType dtype, int rank, int64_t count);
// Bytes of integer `values` as integer `dtype` holds them (the low bits), and back.
std::vector<char> EncodeInts(DataType dtype, const std::vector<int64_t>& values);
std::vector<int64_t> DecodeInts(DataType dtype, const std::vector<char>& bytes);

// The allreduce over `size` ranks of `value(rank, i)`, as the dtype should hold it: integer
// sums and products wrap modulo 2^bits, as TensorFlow's integer arithmetic does; Average on
// integers is the wrapped sum divided toward zero.
std::vector<double> ExpectedAllreduceOf(DataType dtype, ReduceOp op, int size, int64_t count,
                                        const std::function<double(int, int64_t)>& value);
// The same for an integer dtype, in integers (exact at every width, int64 included).
std::vector<int64_t> ExpectedIntAllreduceOf(DataType dtype, ReduceOp op, int size,
                                            int64_t count,
                                            const std::function<int64_t(int, int64_t)>& value);
// The same for TestValues.
std::vector<double> ExpectedAllreduce(DataType dtype, ReduceOp op, int size, int64_t count,
                                      int salt = 0);

// Whether `got` matches `want` for `dtype`: exact for integers, within the dtype's rounding
// for floats. On a mismatch, *why names the first differing element.
bool AllClose(DataType dtype, const std::vector<double>& got, const std::vector<double>& want,
              std::string* why);

// One op a test submitted: its buffers (kept alive until `done`), and its status.
struct Op {
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<char> input, output;
  Shape output_shape;
  std::promise<Status> promise;
  std::shared_future<Status> status = promise.get_future().share();

  std::vector<double> Result() const { return Decode(dtype, output); }
  std::vector<int64_t> IntResult() const { return DecodeInts(dtype, output); }
};
using OpPtr = std::shared_ptr<Op>;

// Where a submitted op's buffers claim to live: host memory by default; a device ordinal
// (with an optional ready event) sends the op down the coordinator's device path. The
// buffers stay host vectors: tests give the coordinator a device executor over host memory.
struct Placement {
  int device = kHostMemory;
  void* ready_event = nullptr;
};

// Submit one collective to `c`; the returned Op completes when its done callback runs.
// The EnqueueFn form hands the entry to any queue (GlobalRuntime::Enqueue, say).
using EnqueueFn = std::function<void(Entry)>;
OpPtr SubmitAllreduce(const EnqueueFn& enqueue, const std::string& name, DataType dtype,
                      const Shape& shape, const std::vector<double>& values, ReduceOp op,
                      Placement where = {});
OpPtr SubmitAllreduce(Coordinator* c, const std::string& name, DataType dtype, const Shape& shape,
                      const std::vector<double>& values, ReduceOp op, Placement where = {});
// An allreduce of `input`, bytes already in `dtype` (EncodeInts, say).
OpPtr SubmitAllreduceOfBytes(const EnqueueFn& enqueue, const std::string& name, DataType dtype,
                             const Shape& shape, std::vector<char> input, ReduceOp op,
                             Placement where = {});
// `allocation_error`: where not empty, allocating the output fails with it (as a framework
// out of memory would).
OpPtr SubmitAllgather(Coordinator* c, const std::string& name, DataType dtype, const Shape& shape,
                      const std::vector<double>& values, Placement where = {},
                      const std::string& allocation_error = "");
OpPtr SubmitBroadcast(Coordinator* c, const std::string& name, DataType dtype, const Shape& shape,
                      const std::vector<double>& values, int root, Placement where = {});

// The op's status, or DeadlineExceeded naming the op if it did not finish in time.
Status WaitFor(const OpPtr& op, double seconds = 10.0);

// Test checks (record failures through test_harness.h):
// `op` finished OK holding the allreduce of TestValues(..., salt) over `size` ranks.
void ExpectAllreduced(const OpPtr& op, ReduceOp reduce, int size, int salt);
// `op` failed with `code` and a message containing `needle`.
void ExpectFailure(const OpPtr& op, StatusCode code, const std::string& needle);

}  // namespace testing
}  // namespace tfring
