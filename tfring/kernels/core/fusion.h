// Fusion planning: which ready tensors share one fusion buffer and one backend call.
//
// A pure function of the (identical on every rank) ordered response list, so every rank
// forms the same groups. Tensors are grouped when they have the same collective, dtype,
// memory (host or GPU), reduce op and joined ranks (and root, for broadcast; and scale
// factors, on a GPU)
// and the group's bytes stay within the threshold. A tensor at or above the threshold
// travels alone (and then needs no copy at all), and so does a host tensor at or above
// `alone_bytes`: fusion saves a backend call per tensor, which on the host is worth a copy
// in and out of the fusion buffer for small tensors only; for a tensor of a megabyte the two
// memcpys cost more than the call. On a GPU the batched copy kernel's copies cost far less
// than a collective call, whatever the tensor's size, so GPU tensors fuse up to the threshold.
#pragma once

#include <cstdint>
#include <vector>

#include "tfring/kernels/core/message.h"

namespace tfring {

struct FusionItem {
  const Response* response;
  int64_t bytes;  // bytes this tensor adds to the fusion buffer
};

// Returns groups of indices into `items`, ordered by each group's first member.
std::vector<std::vector<int>> PlanFusion(const std::vector<FusionItem>& items,
                                         int64_t threshold_bytes, int64_t alone_bytes);

}  // namespace tfring
