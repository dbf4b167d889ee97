#include "tests/cpp/nccl_test_ops.h"

#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "tests/cpp/nccl_job.h"
#include "tfring/kernels/backends/cuda/producer_stream.h"
#include "tfring/kernels/core/buffer_layout.h"

namespace tfring {
namespace testing {
namespace {

// As the TensorFlow and XLA adapters do: an event after the producer's work, then enqueue.
void TieAndEnqueue(const EnqueueFn& enqueue, const GpuPlace& at, Entry e) {
  std::vector<Entry> one;
  one.push_back(std::move(e));
  const Status tied = TieToProducerStream(at.producer, at.device, &one);
  if (!tied.ok()) DieInSetup("a GPU op's producer event", tied);
  enqueue(std::move(one[0]));
}

// The input's device copy, written on the producer stream.
void* ProducedInput(const GpuPlace& at, const std::vector<char>& bytes) {
  void* in = DeviceAlloc(static_cast<int64_t>(bytes.size()));
  cudaMemcpyAsync(in, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, at.producer);
  return in;
}

// The entry's `done`: the device output copied into op->output (its shape known by then),
// both device buffers freed, the op completed.
std::function<void(const Status&)> CopyBackAndFree(OpPtr op, void* in,
                                                   std::shared_ptr<void*> out) {
  return [op, in, out](const Status& s) {
    if (s.ok()) {
      op->output.resize(NumElements(op->output_shape) * DataTypeSize(op->dtype));
      cudaMemcpy(op->output.data(), *out, op->output.size(), cudaMemcpyDeviceToHost);
    }
    cudaFree(in);
    if (*out) cudaFree(*out);
    op->promise.set_value(s);
  };
}

}  // namespace

void* DeviceAlloc(int64_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes > 0 ? bytes : 1) != cudaSuccess) {
    DieInSetup("device memory",
               Status::Internal("cudaMalloc of " + std::to_string(bytes) + " bytes failed"));
  }
  return p;
}

OpPtr SubmitOnGpu(const EnqueueFn& enqueue, const GpuPlace& at, const std::string& name,
                  DataType dtype, const Shape& shape, const std::vector<double>& values,
                  GpuRequest how) {
  return SubmitBytesOnGpu(enqueue, at, name, dtype, shape, Encode(dtype, values), how);
}

OpPtr SubmitBytesOnGpu(const EnqueueFn& enqueue, const GpuPlace& at, const std::string& name,
                       DataType dtype, const Shape& shape, std::vector<char> input,
                       GpuRequest how) {
  auto op = std::make_shared<Op>();
  op->name = name;
  op->dtype = dtype;
  op->input = std::move(input);
  op->output_shape = shape;
  const int64_t bytes = static_cast<int64_t>(op->input.size());
  void* in = ProducedInput(at, op->input);
  int64_t out_bytes = bytes;
  if (how.kind == CollectiveKind::kReducescatter) {
    const int64_t rows = ReducescatterRows(shape[0], at.size)[at.rank];
    op->output_shape[0] = rows;
    out_bytes = shape[0] == 0 ? 0 : bytes / shape[0] * rows;
  }
  auto out = std::make_shared<void*>(how.kind == CollectiveKind::kAllgather ? nullptr
                                                                           : DeviceAlloc(out_bytes));
  Entry e;
  e.request.key.name = name;
  e.request.kind = how.kind;
  e.request.dtype = dtype;
  e.request.shape = shape;
  e.request.reduce_op = how.op;
  e.request.root_rank = how.root;
  e.request.prescale_factor = how.prescale;
  e.request.postscale_factor = how.postscale;
  e.input = in;
  e.output = *out;
  Op* raw = op.get();
  const bool fail_allocation = how.fail_allocation;
  e.allocate_output = [raw, dtype, out, fail_allocation](const Shape& s, void** buffer) {
    if (fail_allocation) return Status::Internal(kInjectedAllocationFailure);
    raw->output_shape = s;
    *out = DeviceAlloc(NumElements(s) * DataTypeSize(dtype));
    *buffer = *out;
    return Status::OK();
  };
  e.done = CopyBackAndFree(op, in, out);
  TieAndEnqueue(enqueue, at, std::move(e));
  return op;
}

OpPtr SubmitAlltoallOnGpu(const EnqueueFn& enqueue, const GpuPlace& at, const std::string& name,
                          const std::vector<int32_t>& input, int64_t row,
                          const std::vector<int64_t>& splits,
                          std::shared_ptr<std::vector<int64_t>> received) {
  auto op = std::make_shared<Op>();
  op->name = name;
  op->dtype = DataType::kInt32;
  op->input.resize(input.size() * sizeof(int32_t));
  std::memcpy(op->input.data(), input.data(), op->input.size());
  void* in = ProducedInput(at, op->input);
  auto out = std::make_shared<void*>(nullptr);
  Entry e;
  e.request.key.name = name;
  e.request.kind = CollectiveKind::kAlltoall;
  e.request.dtype = DataType::kInt32;
  e.request.shape = {static_cast<int64_t>(input.size()) / row, row};
  e.request.splits = splits;
  e.input = in;
  e.set_received_splits = [received](const std::vector<int64_t>& rows) {
    *received = rows;
    return Status::OK();
  };
  Op* raw = op.get();
  e.allocate_output = [raw, out](const Shape& s, void** buffer) {
    raw->output_shape = s;
    *out = DeviceAlloc(NumElements(s) * sizeof(int32_t));
    *buffer = *out;
    return Status::OK();
  };
  e.done = CopyBackAndFree(op, in, out);
  TieAndEnqueue(enqueue, at, std::move(e));
  return op;
}

}  // namespace testing
}  // namespace tfring
