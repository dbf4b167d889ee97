// What every collective kernel shares: the checks before anything is queued, the op's
// process set and name attributes, and handing entries to the runtime (SubmitAll), where an
// unnamed eager call takes its name.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tfring/kernels/common/build_config.h"
#include "tfring/kernels/runtime/global_runtime.h"
#include "tfring/kernels/tf/adapter.h"

#if TFRING_WITH_NCCL
#include "tfring/kernels/tf/gpu/gpu_entry.h"
#endif

namespace tfring {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;

#define TFRING_FAIL_ASYNC(ctx, status, done) \
  do {                                       \
    (ctx)->SetStatus(status);                \
    (done)();                                \
    return;                                  \
  } while (0)

// Checks shared by every collective kernel; false (with the context failed) on error.
// The running runtime, for op `name`: the one check that tfring is initialized, and the one
// lock of the runtime an op takes on the caller's thread (the layout and the coordinator
// come together; GlobalRuntime::Acquire).
inline bool AcquireRuntime(OpKernelContext* ctx, const std::string& name,
                           GlobalRuntime::Running* runtime) {
  if (GlobalRuntime::Get().Acquire(runtime)) return true;
  ctx->SetStatus(ToTfStatus(NotInitialized("running '" + name + "'")));
  return false;
}

// Tensor `t`'s (called `name`) tfring dtype in *dtype. Which dtypes an op takes is checked
// once, where the user calls it (tfring/_ops/op_support.py, check_dtype), and declared to
// TensorFlow by the op's registration (ops.cc), so the conversion cannot fail here unless
// the two disagree: an internal error. What is checked here depends on where the tensor
// lives, which only the kernel knows: NCCL has no 16-bit integers (the GPU kernels' type
// constraint, kernels.cc, already sends such tensors to the CPU kernel; this is its guard).
template <bool kOnGpu>
bool CheckDtype(OpKernelContext* ctx, const std::string& name, const Tensor& t,
                DataType* dtype) {
  if (!FromTfDataType(t.dtype(), dtype)) {
    ctx->SetStatus(absl::InternalError("tfring's op registration admits dtype " +
                                       tensorflow::DataTypeString(t.dtype()) +
                                       ", which its runtime does not carry (tensor '" + name +
                                       "')"));
    return false;
  }
  if (kOnGpu && (*dtype == DataType::kUInt16 || *dtype == DataType::kInt16)) {
    ctx->SetStatus(absl::InvalidArgumentError(GpuInt16Message(DataTypeName(*dtype), name)));
    return false;
  }
  return true;
}

// Both, for a kernel's one tensor.
template <bool kOnGpu>
bool CheckCommon(OpKernelContext* ctx, const std::string& name, const Tensor& t,
                 DataType* dtype, GlobalRuntime::Running* runtime) {
  return AcquireRuntime(ctx, name, runtime) && CheckDtype<kOnGpu>(ctx, name, t, dtype);
}

// Hands `entries` (their done callbacks set, which count down `countdown`) to
// `coordinator`, together; the reference is dropped on return. A kernel on a GPU first ties each entry to TensorFlow's stream
// (tf/gpu/gpu_entry.h), so the runtime reads the input only once its producer has written it.
template <bool kOnGpu>
void Submit(OpKernelContext* ctx, std::vector<Entry> entries,
            std::shared_ptr<Coordinator> coordinator, const OpCountdown& countdown) {
#if TFRING_WITH_NCCL
  if (kOnGpu) {
    const Status s = AttachToGpuStream(ctx, &entries);
    if (!s.ok()) {
      for (Entry& e : entries) e.done(s);
      return;
    }
  }
#endif
  coordinator->EnqueueAll(std::move(entries), &countdown);
}

// An op's process set (its "process_set" attribute: the members' ranks, ascending; empty
// for all ranks), and this rank's place in it.
struct ProcessSetAttr {
  std::vector<int32_t> ranks;
  int64_t world = 0;  // "process_set_world": GlobalRuntime::process_set_world when made

  explicit ProcessSetAttr(OpKernelConstruction* c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &ranks));
    OP_REQUIRES_OK(c, c->GetAttr("process_set_world", &world));
  }

  // An error when the set was made before tfring.elastic renumbered the ranks: a function
  // traced before the reset (Python refuses such a set everywhere else). Every kernel with
  // a process set asks, once per run.
  absl::Status Current(const std::string& name) const {
    if (ranks.empty() || world == GlobalRuntime::Get().process_set_world()) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(StaleProcessSetMessage(ranks, "'" + name + "'"));
  }

  // The set's size and this rank's position in it; an error when this rank is not a member
  // or the set is not Current.
  absl::Status View(const ProcessLayout& layout, const std::string& name, int* size,
                    int* position) const {
    if (ranks.empty()) {
      *size = layout.size;
      *position = layout.rank;
      return absl::OkStatus();
    }
    const absl::Status current = Current(name);
    if (!current.ok()) return current;
    auto it = std::find(ranks.begin(), ranks.end(), layout.rank);
    if (it == ranks.end()) {
      return absl::InvalidArgumentError(NotAMemberMessage(layout.rank, ranks, name));
    }
    *size = static_cast<int>(ranks.size());
    *position = static_cast<int>(it - ranks.begin());
    return absl::OkStatus();
  }
};

// How an op's tensors are named: its "tensor_name" and "call_site" attributes. A name the
// user gave or one derived from the graph (tfring/_ops/naming.py) is used as it is. An unnamed
// eager call has an empty tensor_name and takes the next number of its process set
// (TensorKey::unnamed) only when it is queued (Coordinator::NextUnnamedNumber): a call that
// fails its checks shifts no later number, and the attributes (so TensorFlow's cached
// kernel) stay the same from call to call.
struct OpName {
  std::string name;
  std::string call_site;  // unnamed eager calls: the user's "file:line"
  SharedName shared;      // `name`, for the keys of the op's tensors (made once)

  explicit OpName(std::string fixed) : name(std::move(fixed)), shared(name) {}
  explicit OpName(OpKernelConstruction* c) {
    OP_REQUIRES_OK(c, c->GetAttr("tensor_name", &name));
    OP_REQUIRES_OK(c, c->GetAttr("call_site", &call_site));
    shared = SharedName(name);
  }
  bool unnamed() const { return name.empty(); }
  // What messages call the op's tensors before the op is queued.
  std::string Display() const {
    if (!unnamed()) return name;
    return call_site.empty() ? std::string("unnamed call") : "unnamed call at " + call_site;
  }
  // The key of tensor `index` of `count` (a grouped op's tensors are its parts) in the
  // process set `set`; an unnamed call's number and call site are added when it is queued.
  TensorKey Key(int index, int count, const ProcessSetAttr& set) const {
    TensorKey key = NamedKey(shared);
    key.set = set.ranks;
    if (count > 1) key.part = index;
    return key;
  }
  // What messages call tensor `index` of `count` before the op is queued.
  std::string Display(int index, int count) const {
    return count == 1 ? Display() : KeyString(PartKey(NamedKey(Display()), index));
  }
};

// Hands the kernel's entries to the runtime; the kernel completes when every one is done.
// An eager op of at most KernelCompletion::kInlineWaitMaxBytes waits for them on the
// caller's thread (adapter.h). Unnamed calls get their numbers here, once every check passed.
template <bool kOnGpu>
void SubmitAll(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, std::vector<Entry> entries,
               bool eager, int64_t bytes, const OpName& op_name,
               GlobalRuntime::Running* runtime) {
  if (op_name.unnamed() && !entries.empty()) {
    const int64_t number =
        runtime->coordinator->NextUnnamedNumber(entries[0].request.key.set);
    for (Entry& e : entries) {
      e.request.key.unnamed = number;
      e.request.key.call_site = op_name.call_site;
    }
  }
  KernelCompletion* completion = KernelCompletion::Create(
      ctx, std::move(done), static_cast<int>(entries.size()),
      eager && bytes <= KernelCompletion::kInlineWaitMaxBytes);
  for (Entry& e : entries) {
    e.eager = eager;
    e.done = completion->EntryCallback();
  }
  Submit<kOnGpu>(ctx, std::move(entries), std::move(runtime->coordinator),
                 completion->countdown());
  completion->WaitInlineAndRelease();
}

template <bool kOnGpu>
void SubmitOne(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, Entry e, bool eager,
               int64_t bytes, const OpName& op_name, GlobalRuntime::Running* runtime) {
  std::vector<Entry> entries;
  entries.push_back(std::move(e));
  SubmitAll<kOnGpu>(ctx, std::move(done), std::move(entries), eager, bytes, op_name, runtime);
}

}  // namespace tfring
