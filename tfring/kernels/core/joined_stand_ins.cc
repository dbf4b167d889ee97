#include "tfring/kernels/core/joined_stand_ins.h"

#include "tfring/kernels/common/elementwise.h"
#include "tfring/kernels/core/buffer_layout.h"
#include "tfring/kernels/core/negotiator.h"

namespace tfring {

char* JoinedStandIns::Buffer(size_t bytes) {
  buffers_.emplace_back(bytes);
  return buffers_.back().data();
}

Entry* JoinedStandIns::For(const Response& r, int position, int set_size) {
  entries_.emplace_back();
  Entry* e = &entries_.back();
  e->request = SignatureOf(r);
  e->request.prescale_factor = 1.0;  // the identity stays the identity
  e->done = [](const Status&) {};
  const int64_t count = NumElements(r.shape);
  const size_t esize = DataTypeSize(r.dtype);
  switch (r.kind) {
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kReducescatter: {
      char* in = Buffer(count * esize);
      const ReduceOp op = WireOp(r.reduce_op);
      if (MixedParts(r)) {  // each tensor of the unit in its own dtype; the gaps are unread
        const Packed packed = PlanParts(r.parts);
        for (size_t i = 0; i < r.parts.size(); ++i) {
          FillIdentity(r.parts[i].dtype, op, in + packed.offsets[i],
                       NumElements(r.parts[i].shape));
        }
      } else {
        FillIdentity(r.dtype, op, in, count);
      }
      e->input = in;
      e->output = in;
      if (r.kind == CollectiveKind::kReducescatter) {
        const int64_t rows = ReducescatterRows(r.shape[0], set_size)[position];
        e->output = Buffer(rows * RowBytes(e->request));
      }
      break;
    }
    case CollectiveKind::kBroadcast:
      e->output = Buffer(count * esize);
      e->input = e->output;
      break;
    case CollectiveKind::kAllgather:
      e->request.shape[0] = 0;  // contributes no rows
      e->allocate_output = [this, esize](const Shape& shape, void** buffer) {
        *buffer = Buffer(NumElements(shape) * esize);
        return Status::OK();
      };
      break;
    default:
      break;  // barrier: no data; alltoall never runs with joined ranks (JoinedProblem)
  }
  return e;
}

}  // namespace tfring
