// The handler of tfring's XLA custom calls on the host (xla_call.h): it hands the call's
// buffers to the runtime as one op's entries, as an eager op would, and returns when they
// are done.
//
// XLA's buffers are reduced where they lie: the inputs are the call's operands, the outputs
// its results (which XLA may alias to the operands: then the reduction is in place). The
// entries are marked eager, so the calling thread runs the cycles itself (coordinator.h)
// instead of waiting for a burst of graph ops that will not come: XLA runs the call alone,
// and the step's tensors arrive together only when the lowering groups them in one call.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tfring/kernels/core/entry.h"
#include "tfring/kernels/runtime/global_runtime.h"
#include "tfring/kernels/tf/xla/xla_call.h"
#include "xla/ffi/api/ffi.h"

// Defined in TensorFlow's library (libtensorflow_cc), not declared in its public headers.
namespace xla::ffi {
const XLA_FFI_Api* GetXlaFfiApi();
}  // namespace xla::ffi

namespace tfring {
namespace {

namespace ffi = ::xla::ffi;

bool FromFfiDataType(ffi::DataType in, DataType* out) {
  switch (in) {
    case ffi::DataType::U8: *out = DataType::kUInt8; return true;
    case ffi::DataType::S8: *out = DataType::kInt8; return true;
    case ffi::DataType::U16: *out = DataType::kUInt16; return true;
    case ffi::DataType::S16: *out = DataType::kInt16; return true;
    case ffi::DataType::S32: *out = DataType::kInt32; return true;
    case ffi::DataType::S64: *out = DataType::kInt64; return true;
    case ffi::DataType::F16: *out = DataType::kFloat16; return true;
    case ffi::DataType::BF16: *out = DataType::kBFloat16; return true;
    case ffi::DataType::F32: *out = DataType::kFloat32; return true;
    case ffi::DataType::F64: *out = DataType::kFloat64; return true;
    case ffi::DataType::PRED: *out = DataType::kBool; return true;
    default: return false;
  }
}

ffi::Error ToFfiError(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return ffi::Error::Success();
    case StatusCode::kInvalidArgument: return ffi::Error(ffi::ErrorCode::kInvalidArgument, s.message());
    case StatusCode::kFailedPrecondition:
      return ffi::Error(ffi::ErrorCode::kFailedPrecondition, s.message());
    case StatusCode::kAborted: return ffi::Error(ffi::ErrorCode::kAborted, s.message());
    case StatusCode::kDeadlineExceeded:
      return ffi::Error(ffi::ErrorCode::kDeadlineExceeded, s.message());
    case StatusCode::kUnavailable: return ffi::Error(ffi::ErrorCode::kUnavailable, s.message());
    case StatusCode::kInternal: return ffi::Error(ffi::ErrorCode::kInternal, s.message());
  }
  return ffi::Error(ffi::ErrorCode::kUnknown, s.message());
}

// Waits for a set of entries; keeps the first failure.
class Completion {
 public:
  explicit Completion(int pending) : pending_(pending) {}

  std::function<void(const Status&)> Callback() {
    return [this](const Status& s) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!s.ok() && first_error_.ok()) first_error_ = s;
      if (--pending_ == 0) all_done_.notify_all();
    };
  }

  Status Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    all_done_.wait(lock, [this] { return pending_ == 0; });
    return first_error_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_done_;
  int pending_;
  Status first_error_;
};

ffi::Error RunOnHost(ffi::RemainingArgs args, ffi::RemainingRets rets, int32_t kind,
                     std::string_view name, int32_t reduce_op, float prescale, float postscale,
                     int32_t root_rank, ffi::Span<const int32_t> process_set, int32_t cacheable) {
  const std::string base(name);
  if (!GlobalRuntime::Get().initialized()) {
    return ffi::Error(ffi::ErrorCode::kFailedPrecondition,
                      "tfring has not been initialized: call tfring.init() before running '" +
                          base + "'");
  }
  const int n = static_cast<int>(args.size());
  if (n != static_cast<int>(rets.size())) {
    return ffi::Error::Internal("tfring's XLA call '" + base + "' has " + std::to_string(n) +
                                " operands but " + std::to_string(rets.size()) + " results");
  }
  std::vector<Entry> entries(n);
  for (int i = 0; i < n; ++i) {
    auto input = args.get<ffi::AnyBuffer>(i);
    auto output = rets.get<ffi::AnyBuffer>(i);
    if (input.has_error()) return input.error();
    if (output.has_error()) return output.error();
    Entry& e = entries[i];
    Request& r = e.request;
    r.name = n == 1 ? base : base + "." + std::to_string(i);
    if (!FromFfiDataType(input->element_type(), &r.dtype)) {
      return ffi::Error::InvalidArgument("tfring does not support the XLA element type " +
                                         std::to_string(static_cast<int>(input->element_type())) +
                                         " (tensor '" + r.name + "')");
    }
    r.kind = static_cast<CollectiveKind>(kind);
    r.reduce_op = static_cast<ReduceOp>(reduce_op);
    r.prescale_factor = prescale;
    r.postscale_factor = postscale;
    r.root_rank = root_rank;
    r.process_set.assign(process_set.begin(), process_set.end());
    r.cacheable = cacheable != 0;
    const auto dims = input->dimensions();
    r.shape.assign(dims.begin(), dims.end());
    e.input = input->untyped_data();
    e.output = (*output)->untyped_data();
    e.eager = true;  // XLA's thread waits for this call alone: run it at once (see the top)
  }
  if (n == 0) return ffi::Error::Success();
  Completion completion(n);
  for (Entry& e : entries) e.done = completion.Callback();
  GlobalRuntime::Get().EnqueueAll(std::move(entries));
  return ToFfiError(completion.Wait());
}

}  // namespace

XLA_FFI_DEFINE_HANDLER(kRunOnHost, RunOnHost,
                       ffi::Ffi::Bind()
                           .RemainingArgs()
                           .RemainingRets()
                           .Attr<int32_t>("kind")
                           .Attr<std::string_view>("name")
                           .Attr<int32_t>("reduce_op")
                           .Attr<float>("prescale")
                           .Attr<float>("postscale")
                           .Attr<int32_t>("root_rank")
                           .Attr<ffi::Span<const int32_t>>("process_set")
                           .Attr<int32_t>("cacheable"));

XLA_FFI_REGISTER_HANDLER(::xla::ffi::GetXlaFfiApi(), xla_call::kTarget, "Host", kRunOnHost);

}  // namespace tfring
