// The handler of tfring's XLA custom calls on the host (xla_call.h): it hands the call's
// buffers to the runtime as one op's entries, as an eager op would, and returns when they
// are done.
//
// XLA's buffers are reduced where they lie: the inputs are the call's operands, the outputs
// its results (which XLA may alias to the operands: then the reduction is in place); a
// grouped allreduce's tensors are packed into one unit first (RunAsUnit). The
// entries are marked eager, so the calling thread runs the cycles itself (coordinator.h)
// instead of waiting for a burst of graph ops that will not come: XLA runs the call alone,
// and the step's tensors arrive together only when the lowering groups them in one call.
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tfring/kernels/core/buffer_layout.h"
#include "tfring/kernels/core/entry.h"
#include "tfring/kernels/runtime/global_runtime.h"
#include "tfring/kernels/tf/xla/xla_call.h"
#include "tfring/kernels/tf/xla/xla_handler.h"
#include "xla/ffi/api/ffi.h"

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
      if (pending_.CountDown()) all_done_.notify_all();
    };
  }
  // The count the callbacks keep, which the runtime reads while this thread runs cycles.
  const OpCountdown& countdown() const { return pending_; }

  Status Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    all_done_.wait(lock, [this] { return pending_.finished(); });
    return first_error_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_done_;
  OpCountdown pending_;
  Status first_error_;
};

// Reads attribute `name` of the call into `*out`.
template <typename T, typename Out>
ffi::Error Read(const ffi::Dictionary& attrs, const char* name, Out* out) {
  auto value = attrs.get<T>(name);
  if (value.has_error()) return value.error();
  *out = static_cast<Out>(*value);
  return ffi::Error::Success();
}

#define TFRING_RETURN_IF_FFI_ERROR(expr)       \
  do {                                         \
    ffi::Error error_ = (expr);                \
    if (error_.failure()) return error_;       \
  } while (0)

// A grouped allreduce travels as one unit (Signature::parts), as the TF kernel's does
// (PackUnit in kernels.cc), so that the call takes the runtime one entry, under the op's
// name, however it ran: packed into a buffer of the call's own, reduced there, and copied
// out into XLA's results (as a fused group's tensors leave a fusion buffer).
ffi::Error RunAsUnit(std::vector<Entry> tensors, std::string name) {
  Entry unit;
  unit.request = tensors[0].request;  // what the call's tensors share
  unit.request.key.name = std::move(name);  // the call's, not its first tensor's (same set)
  unit.request.key.part = -1;
  unit.request.parts.resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    unit.request.parts[i] = {tensors[i].request.dtype, tensors[i].request.shape};
  }
  const Packed packed = DescribeUnit(&unit.request);
  std::unique_ptr<char[]> buffer(new char[packed.total_bytes + 1]);  // +1: never null
  std::vector<const void*> inputs;
  for (const Entry& e : tensors) inputs.push_back(e.input);
  PackInto(packed, inputs, buffer.get());
  unit.input = buffer.get();
  unit.output = buffer.get();
  unit.eager = true;
  std::vector<Entry> one;
  one.push_back(std::move(unit));
  TFRING_RETURN_IF_FFI_ERROR(xla_call::SubmitAndWait(std::move(one)));
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (packed.bytes[i] > 0) {
      std::memcpy(tensors[i].output, buffer.get() + packed.offsets[i], packed.bytes[i]);
    }
  }
  return ffi::Error::Success();
}

ffi::Error RunOnHost(ffi::RemainingArgs args, ffi::RemainingRets rets, ffi::Dictionary attrs) {
  std::vector<Entry> entries;
  TFRING_RETURN_IF_FFI_ERROR(xla_call::MakeEntries(args, rets, attrs, &entries));
  if (entries.size() > 1 && entries[0].request.kind == CollectiveKind::kAllreduce) {
    std::string_view name;
    TFRING_RETURN_IF_FFI_ERROR(Read<std::string_view>(attrs, "name", &name));
    return RunAsUnit(std::move(entries), std::string(name));
  }
  return xla_call::SubmitAndWait(std::move(entries));
}

}  // namespace

namespace xla_call {

ffi::Error MakeEntries(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets,
                       const ffi::Dictionary& attrs, std::vector<Entry>* entries) {
  std::string_view name_view;
  TFRING_RETURN_IF_FFI_ERROR(Read<std::string_view>(attrs, "name", &name_view));
  const std::string base(name_view);  // before init(), SubmitAndWait's queueing fails it
  Request r;  // what every tensor of the call shares
  int32_t kind = 0, reduce_op = 0, cacheable = 1;
  TFRING_RETURN_IF_FFI_ERROR(Read<int32_t>(attrs, "kind", &kind));
  TFRING_RETURN_IF_FFI_ERROR(Read<int32_t>(attrs, "reduce_op", &reduce_op));
  TFRING_RETURN_IF_FFI_ERROR(Read<float>(attrs, "prescale", &r.prescale_factor));
  TFRING_RETURN_IF_FFI_ERROR(Read<float>(attrs, "postscale", &r.postscale_factor));
  TFRING_RETURN_IF_FFI_ERROR(Read<int32_t>(attrs, "root_rank", &r.root_rank));
  TFRING_RETURN_IF_FFI_ERROR(Read<int32_t>(attrs, "cacheable", &cacheable));
  auto ranks = attrs.get<ffi::Span<const int32_t>>("process_set");
  if (ranks.has_error()) return ranks.error();
  int64_t world = 0;
  TFRING_RETURN_IF_FFI_ERROR(Read<int64_t>(attrs, "process_set_world", &world));
  if (ranks->size() > 0 && world != GlobalRuntime::Get().process_set_world()) {
    // An executable compiled before tfring.elastic renumbered the ranks.
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, StaleProcessSetMessage(
        std::vector<int32_t>(ranks->begin(), ranks->end()), "'" + base + "'"));
  }
  r.kind = static_cast<CollectiveKind>(kind);
  r.reduce_op = static_cast<ReduceOp>(reduce_op);
  r.cacheable = cacheable != 0;
  r.key.set.assign(ranks->begin(), ranks->end());

  const int n = static_cast<int>(args.size());
  if (n != static_cast<int>(rets.size())) {
    return ffi::Error::Internal("tfring's XLA call '" + base + "' has " + std::to_string(n) +
                                " operands but " + std::to_string(rets.size()) + " results");
  }
  entries->assign(n, Entry());
  for (int i = 0; i < n; ++i) {
    auto input = args.get<ffi::AnyBuffer>(i);
    auto output = rets.get<ffi::AnyBuffer>(i);
    if (input.has_error()) return input.error();
    if (output.has_error()) return output.error();
    Entry& e = (*entries)[i];
    e.request = r;
    e.request.key.name = base;
    if (n > 1) e.request.key.part = i;
    e.request.name = KeyString(e.request.key);  // for messages until it is queued
    if (!FromFfiDataType(input->element_type(), &e.request.dtype)) {
      return ffi::Error::InvalidArgument(
          "tfring does not support the XLA element type " +
          std::to_string(static_cast<int>(input->element_type())) + " (tensor '" +
          e.request.name + "')");
    }
    const auto dims = input->dimensions();
    e.request.shape.assign(dims.begin(), dims.end());
    e.input = input->untyped_data();
    e.output = (*output)->untyped_data();
    e.eager = true;  // XLA's thread waits for this call alone: run it at once (see the top)
  }
  return ffi::Error::Success();
}

ffi::Error SubmitAndWait(std::vector<Entry> entries) {
  if (entries.empty()) return ffi::Error::Success();
  Completion completion(static_cast<int>(entries.size()));
  for (Entry& e : entries) {
    auto wrapped = std::move(e.done);  // a GPU entry's clean-up, if any
    auto mine = completion.Callback();
    e.done = wrapped ? std::function<void(const Status&)>([wrapped, mine](const Status& s) {
      wrapped(s);
      mine(s);
    }) : mine;
  }
  GlobalRuntime::Get().EnqueueAll(std::move(entries), &completion.countdown());
  return ToFfiError(completion.Wait());
}

}  // namespace xla_call

XLA_FFI_DEFINE_HANDLER(kRunOnHost, RunOnHost,
                       ffi::Ffi::Bind().RemainingArgs().RemainingRets().Attrs());

XLA_FFI_REGISTER_HANDLER(::xla::ffi::GetXlaFfiApi(), xla_call::kTarget, "Host", kRunOnHost);

}  // namespace tfring
