#include "tfring/kernels/core/cache_sync.h"

#include "tfring/kernels/common/logging.h"

namespace tfring {
namespace {

// Whether `rank` is in `set` (empty: all ranks). No allocation: runs per cache slot per
// cycle.
bool InSet(const std::vector<int32_t>& set, int rank) {
  return set.empty() || IsMember(set, rank);
}

}  // namespace

CacheSync::CacheSync(const Options& options, int rank, int size)
    : options_(options), rank_(rank), size_(size), cache_(options.cache_capacity) {}

void CacheSync::MarkSlotsNotHeldUp(bool joined, CycleBits* bits) const {
  for (int slot = 0; slot < cache_.num_bits(); ++slot) {
    if (!cache_.used(slot)) continue;
    const Response& cached = cache_.response(slot);
    if (joined && !cached.shared_call_site.empty()) {
      bits->Invalidate(slot);
    } else if (joined || !InSet(cached.key.set, rank_)) {
      bits->SetReady(slot);
    }
  }
}

void CacheSync::TakeReady(const CycleBits& bits, const std::vector<bool>& joined,
                          bool any_joined, CycleResponses* execute, std::vector<int>* erased) {
  for (int slot = 0; slot < cache_.num_bits(); ++slot) {
    if (!bits.valid(slot)) {
      cache_.Erase(slot);
      erased->push_back(slot);
    } else if (bits.ready(slot)) {
      cache_.Touch(slot);
      if (!any_joined) {
        execute->Add(&cache_.response(slot), slot);  // slots stay put (response_cache.h)
        continue;
      }
      Response r = cache_.response(slot);
      const std::vector<int32_t> members = SetMembers(r.key.set, size_);
      for (int32_t m : members) {
        if (joined[m]) r.joined.push_back(m);
      }
      // Every member joined: nobody submitted it (joined ranks mark every slot ready).
      if (r.joined.size() == members.size()) continue;
      execute->Add(std::move(r), slot);
    }
  }
}

int CacheSync::Record(const Response& r) {
  if (!r.ok() || !r.cacheable) return -1;
  int evicted;
  if (r.shared_call_site.empty()) {
    evicted = cache_.Put(r, SignatureOf(r));
  } else {
    Response under_site = r;  // unnamed calls: under their call site (the take step looks)
    under_site.name = UnnamedCacheKey(r.shared_call_site, r.key.set);
    evicted = cache_.Put(under_site, SignatureOf(under_site));
  }
  if (evicted >= 0 && rank_ == 0 && !eviction_warned_) {
    eviction_warned_ = true;
    TFRING_LOG(kWarning) << "tfring's response cache is full (TFRING_CACHE_CAPACITY="
                         << options_.cache_capacity
                         << " tensors): a newly negotiated tensor took the place of the least "
                            "recently used one. If a training step uses more tensors than "
                            "that, every step is negotiated tensor by tensor; raise "
                            "TFRING_CACHE_CAPACITY above the step's count. (Said once.)";
  }
  return evicted;
}

}  // namespace tfring
