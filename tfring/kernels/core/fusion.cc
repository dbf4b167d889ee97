#include "tfring/kernels/core/fusion.h"

#include <algorithm>

namespace tfring {
namespace {

bool Compatible(const Response& a, const Response& b) {
  if (a.kind != b.kind || a.dtype != b.dtype || a.on_device != b.on_device) return false;
  // A unit of tensors of several dtypes is reduced dtype by dtype, in its own buffer.
  if (MixedParts(a) || MixedParts(b)) return false;
  // An Average divides the fused buffer by one count of ranks with data.
  if (a.joined != b.joined) return false;
  if (a.kind == CollectiveKind::kReducescatter || a.kind == CollectiveKind::kAlltoall) {
    return false;  // each goes alone
  }
  if (a.kind == CollectiveKind::kAllreduce) {
    // The device executor folds the scale factors into the reduction of the whole buffer.
    return a.reduce_op == b.reduce_op && (!a.on_device || (a.prescale_factor == b.prescale_factor &&
                                                            a.postscale_factor == b.postscale_factor));
  }
  if (a.kind == CollectiveKind::kBroadcast) return a.root_rank == b.root_rank;
  return true;
}

}  // namespace

std::vector<std::vector<int>> PlanFusion(const std::vector<FusionItem>& items,
                                         int64_t threshold_bytes, int64_t alone_bytes) {
  // GPU tensors fuse up to the threshold: their copies run on the device at hundreds of GB/s
  // (backends/cuda/batched_copy.h), far below what a collective call of their own costs.
  auto fusible = [&](const FusionItem& item) {
    const int64_t below = item.response->on_device ? threshold_bytes
                                                   : std::min(threshold_bytes, alone_bytes);
    return item.bytes < below;
  };
  std::vector<std::vector<int>> groups;
  std::vector<int64_t> group_bytes;
  for (int i = 0; i < static_cast<int>(items.size()); ++i) {
    const FusionItem& item = items[i];
    int target = -1;
    if (fusible(item)) {
      for (size_t g = 0; g < groups.size(); ++g) {
        const FusionItem& head = items[groups[g][0]];
        if (fusible(head) && Compatible(*head.response, *item.response) &&
            group_bytes[g] + item.bytes <= threshold_bytes) {
          target = static_cast<int>(g);
          break;
        }
      }
    }
    if (target < 0) {
      groups.push_back({i});
      group_bytes.push_back(item.bytes);
    } else {
      groups[target].push_back(i);
      group_bytes[target] += item.bytes;
    }
  }
  return groups;
}

}  // namespace tfring
