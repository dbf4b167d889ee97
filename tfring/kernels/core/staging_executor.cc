#include "tfring/kernels/core/staging_executor.h"

#include <algorithm>
#include <cstring>

#include "tfring/kernels/core/tensor_key.h"

namespace tfring {
namespace {

// The most of a failing rank's reason that travels to its peers.
constexpr size_t kReasonBytes = 1024;

// `why`, said of `what` of e's tensor ("waiting for the producer", ...).
Status Staging(const Entry& e, const char* what, const Status& why, const char* after = "") {
  if (why.ok()) return why;
  return Status(why.code(), std::string(what) + " of '" + KeyString(e.request.key) +
                                "' failed" + after + ": " + why.message());
}

}  // namespace

StagingExecutor::StagingExecutor(std::unique_ptr<DeviceMemory> memory,
                                 std::unique_ptr<HostExecutor> host, int rank, int size)
    : memory_(std::move(memory)), host_(std::move(host)), rank_(rank), size_(size) {}

Status StagingExecutor::StageIn(const std::vector<Entry*>& group, Staged* staged) {
  return AgreeStagedIn(StageInThisRank(group, staged));
}

Status StagingExecutor::AgreeStagedIn(const Status& mine) {
  Backend* backend = host_->backend();
  int32_t first_failed = mine.ok() ? size_ : rank_;
  TFRING_RETURN_IF_ERROR(
      backend->Allreduce(&first_failed, &first_failed, 1, DataType::kInt32, ReduceOp::kMin));
  if (first_failed == size_) return Status::OK();
  // Byte 0: the status code; then the message, cut to fit.
  char reason[kReasonBytes] = {};
  if (rank_ == first_failed) {
    reason[0] = static_cast<char>(mine.code());
    std::memcpy(reason + 1, mine.message().data(),
                std::min(mine.message().size(), kReasonBytes - 2));
  }
  TFRING_RETURN_IF_ERROR(backend->Broadcast(reason, kReasonBytes, first_failed));
  const std::string no_rank_ran = " (so no rank ran the collective)";
  if (!mine.ok()) return Status(mine.code(), mine.message() + no_rank_ran);
  return Status(FailureCodeFromWire(static_cast<unsigned char>(reason[0])),
                "rank " + std::to_string(first_failed) + " could not stage its input: " +
                    std::string(reason + 1) + no_rank_ran);
}

Status StagingExecutor::StageInThisRank(const std::vector<Entry*>& group, Staged* staged) {
  const size_t n = group.size();
  staged->entries.resize(n);
  staged->buffers.resize(n);
  staged->gathered.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Entry& e = *group[i];
    Entry& twin = staged->entries[i];
    twin.request = e.request;
    twin.request.on_device = false;
    std::vector<char>& buffer = staged->buffers[i];
    buffer.resize(TensorBytes(e.request));
    if (timeline_) timeline_->Phase(e.request, "WAIT_FOR_DATA");
    TFRING_RETURN_IF_ERROR(Staging(e, "waiting for the producer", memory_->WaitForInput(e)));
    if (timeline_) timeline_->Phase(e.request, "MEMCPY_DEVICE_TO_HOST");
    TFRING_RETURN_IF_ERROR(Staging(e, "copying to the host the input",
                                   memory_->CopyToHost(buffer.data(), e.input, buffer.size(),
                                                       e.device)));
    // Allreduce and broadcast work in place in the one host buffer; allgather's output
    // is allocated once its shape is known.
    twin.input = buffer.data();
    const bool allocated_later = e.request.kind == CollectiveKind::kAllgather ||
                                 e.request.kind == CollectiveKind::kAlltoall;
    twin.output = allocated_later ? nullptr : buffer.data();
    if (e.request.kind == CollectiveKind::kReducescatter) {
      std::vector<char>& out = staged->gathered[i];
      out.resize(ReducescatterRows(e.request.shape[0], size_)[rank_] * RowBytes(e.request) + 1);
      out.pop_back();  // +1 above: never a null data(), even for no rows
      twin.output = out.data();
    }
    staged->pointers.push_back(&twin);
  }
  return Status::OK();
}

Status StagingExecutor::StageOut(const std::vector<Entry*>& group, const Staged& staged) {
  if (recording()) Phase(group, "MEMCPY_HOST_TO_DEVICE");
  for (size_t i = 0; i < group.size(); ++i) {
    const bool gathered = group[i]->request.kind != CollectiveKind::kAllreduce &&
                          group[i]->request.kind != CollectiveKind::kBroadcast;
    const std::vector<char>& result = gathered ? staged.gathered[i] : staged.buffers[i];
    // Only this rank's op fails: the collective ran, and the peers' results are whole.
    const Status copied = memory_->CopyToDevice(group[i]->output, result.data(),
                                                static_cast<int64_t>(result.size()),
                                                group[i]->device);
    TFRING_RETURN_IF_ERROR(Staging(*group[i], "copying back to the GPU the result", copied,
                                   " on this rank (the other ranks' completed)"));
  }
  return Status::OK();
}

Status StagingExecutor::Allreduce(const std::vector<Entry*>& group, const Response& r) {
  Staged staged;
  TFRING_RETURN_IF_ERROR(StageIn(group, &staged));
  TFRING_RETURN_IF_ERROR(host_->Allreduce(staged.pointers, r));
  return StageOut(group, staged);
}

Status StagingExecutor::Allgather(const std::vector<Entry*>& group,
                                  const std::vector<const Response*>& rs) {
  Staged staged;
  TFRING_RETURN_IF_ERROR(StageIn(group, &staged));
  AllocateOutputsLater(group, &staged);
  TFRING_RETURN_IF_ERROR(host_->Allgather(staged.pointers, rs));
  return StageOut(group, staged);
}

void StagingExecutor::AllocateOutputsLater(const std::vector<Entry*>& group, Staged* staged) {
  for (size_t i = 0; i < group.size(); ++i) {
    Entry* device_entry = group[i];
    std::vector<char>* gathered = &staged->gathered[i];
    // The host executor allocates each output once the gathered shape is known: allocate
    // the GPU output then too, and gather into a host buffer of the same size.
    DeviceMemory* memory = memory_.get();
    staged->entries[i].set_received_splits = device_entry->set_received_splits;
    staged->entries[i].allocate_output = [device_entry, gathered, memory](const Shape& shape,
                                                                         void** buffer) -> Status {
      TFRING_RETURN_IF_ERROR(device_entry->allocate_output(shape, &device_entry->output));
      TFRING_RETURN_IF_ERROR(memory->WaitForStream(*device_entry));
      Request gathered_request = device_entry->request;
      gathered_request.shape = shape;
      gathered->resize(TensorBytes(gathered_request));
      *buffer = gathered->data();
      return Status::OK();
    };
  }
}

Status StagingExecutor::Broadcast(const std::vector<Entry*>& group, const Response& r) {
  // Every rank stages its input; only the root's travels, the others' are overwritten.
  Staged staged;
  TFRING_RETURN_IF_ERROR(StageIn(group, &staged));
  TFRING_RETURN_IF_ERROR(host_->Broadcast(staged.pointers, r));
  return StageOut(group, staged);
}

Status StagingExecutor::Reducescatter(const std::vector<Entry*>& group, const Response& r) {
  Staged staged;
  TFRING_RETURN_IF_ERROR(StageIn(group, &staged));
  TFRING_RETURN_IF_ERROR(host_->Reducescatter(staged.pointers, r));
  return StageOut(group, staged);
}

Status StagingExecutor::Alltoall(const std::vector<Entry*>& group, const Response& r) {
  Staged staged;
  TFRING_RETURN_IF_ERROR(StageIn(group, &staged));
  AllocateOutputsLater(group, &staged);
  TFRING_RETURN_IF_ERROR(host_->Alltoall(staged.pointers, r));
  return StageOut(group, staged);
}

}  // namespace tfring
