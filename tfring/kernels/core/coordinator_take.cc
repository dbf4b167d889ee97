// How the cycle takes new entries from the queue: each one found a cache slot (from its
// kernel's ticket, by name, or by its call site when unnamed) and held there, or held by
// name for negotiation; and an entry moved from its slot to negotiation. The cycle itself
// is in coordinator.cc.
#include <string>
#include <vector>

#include "tfring/kernels/core/coordinator.h"

namespace tfring {
namespace {

// A cached entry that waited this long gives up its slot and is negotiated.
constexpr double kCachedWaitDemoteSeconds = 1.0;

}  // namespace

void Coordinator::TakeNewEntries(SteadyClock::time_point now, std::vector<int>* invalidate,
                                 bool* progress) {
  std::vector<std::vector<Entry>>& fresh = taken_;  // empty; its capacity is reused
  intake_.Take(&fresh);
  PrefetchSlots(fresh);
  for (std::vector<Entry>& op : fresh) {
    for (Entry& e : op) {
      *progress = true;
      TakeNewEntry(&e, now, invalidate);
    }
  }
  fresh.clear();  // each entry moved into pending_ or failed
  // A cached entry that waited long gives up its slot: rank 0 then sees it in negotiation,
  // where the stall inspector can name the ranks that have not submitted it.
  pending_.ForEachWaiting([&](int slot, Pending& p) {
    if (std::chrono::duration<double>(now - p.since).count() > kCachedWaitDemoteSeconds) {
      invalidate->push_back(slot);
    }
  });
}

void Coordinator::TakeNewEntry(Entry* entry, SteadyClock::time_point now,
                               std::vector<int>* invalidate) {
  Entry& e = *entry;
  const std::string& name = e.request.name;  // an unnamed call's own, "unnamed.<n>"
  if (e.request.kind == CollectiveKind::kJoin && joined_) {
    e.done(Status::FailedPrecondition("join() is already pending on rank " +
                                      std::to_string(rank_)));
    return;
  }
  // A named entry's cache slot, from its kernel's ticket or found by name, once: it also
  // says whether an entry of that name waits there already.
  const int named_slot = CachedByCallSite(e.request) ? -1 : NamedSlot(e);
  if ((named_slot >= 0 && pending_.AtSlot(named_slot)) || pending_.HasName(name)) {
    e.done(Status::InvalidArgument(
        "Tensor name '" + name + "' is already in flight on rank " + std::to_string(rank_) +
        ": a second op with the same name was submitted before the first finished. Give "
        "each concurrent op its own name="));
    return;
  }
  if (e.request.kind == CollectiveKind::kJoin) {
    // From now on this rank takes part with no data. Its cached entries go through
    // negotiation, where rank 0 sees that it has them: a cached run counts every joined
    // member of the set as having none.
    joined_ = true;
    for (int slot : pending_.WaitingSlots()) invalidate->push_back(slot);
    std::string key = name;
    pending_.by_name().emplace(std::piecewise_construct, std::forward_as_tuple(std::move(key)),
                               std::forward_as_tuple(std::move(e), State::kJoined, now));
    return;
  }
  if (joined_) {
    e.done(Status::FailedPrecondition(
        "rank " + std::to_string(rank_) + " has joined (tfring.join) and cannot run '" + name +
        "' until every rank has joined"));
    return;
  }
  const int slot = CachedSlotFor(&e, named_slot, invalidate);
  timeline_.Submitted(e.request, e.created);
  timeline_.Phase(e.request, "NEGOTIATE");
  if (slot >= 0) {
    pending_.PlaceAtSlot(slot, std::move(e), now);
    return;
  }
  send_order_.push_back(name);
  std::string key = name;
  pending_.by_name().emplace(std::piecewise_construct, std::forward_as_tuple(std::move(key)),
                             std::forward_as_tuple(std::move(e), State::kToSend, now));
}

void Coordinator::PrefetchSlots(const std::vector<std::vector<Entry>>& ops) const {
  const auto each_ticket = [&](auto fn) {
    for (const std::vector<Entry>& op : ops) {
      for (const Entry& e : op) {
        if (e.cache_ticket != nullptr) fn(e.cache_ticket);
      }
    }
  };
  each_ticket([](const CacheTicket* t) { __builtin_prefetch(t); });
  // Each pass reads what the one before asked for.
  const auto slot_of = [](const CacheTicket* t) {
    return CacheTicket::SlotOf(t->value.load(std::memory_order_relaxed));
  };
  const ResponseCache& cache = cache_sync_.cache();
  each_ticket([&](const CacheTicket* t) {
    const int slot = slot_of(t);
    cache.Prefetch(slot, /*deep=*/false);
    pending_.PrefetchSlot(slot);
  });
  each_ticket([&](const CacheTicket* t) { cache.Prefetch(slot_of(t), /*deep=*/true); });
}

int Coordinator::NamedSlot(const Entry& e) const {
  if (e.cache_ticket != nullptr) {
    const uint64_t ticket = e.cache_ticket->value.load(std::memory_order_relaxed);
    const int slot = CacheTicket::SlotOf(ticket);
    const uint32_t generation = CacheTicket::GenerationOf(ticket);
    // Unchanged since it was issued for this name (a ticket serves one name: entry.h), so
    // it still holds this name: no compare of names, whose strings are cold in the CPU's
    // caches after a step's copies (docs/benchmarks-allreduce.md).
    if (cache_sync_.cache().Holds(slot, generation)) return slot;
  }
  return cache_sync_.cache().Find(e.request.name);
}

int Coordinator::CachedSlotFor(Entry* e, int named_slot, std::vector<int>* invalidate) {
  const Request& q = e->request;
  const ResponseCache& cache = cache_sync_.cache();
  if (!CachedByCallSite(q)) {  // named, or named after its graph: cached under its name
    // The slot is this name's (found by name, or by a ticket of this name): compare the rest.
    if (named_slot >= 0 && cache.signature(named_slot).SameButName(q)) {
      if (e->cache_ticket != nullptr) {
        const uint64_t ticket = CacheTicket::Make(named_slot, cache.generation(named_slot));
        if (e->cache_ticket->value.load(std::memory_order_relaxed) != ticket) {
          e->cache_ticket->value.store(ticket, std::memory_order_relaxed);
        }
      }
      return named_slot;
    }
    if (named_slot >= 0) invalidate->push_back(named_slot);  // the name came with another signature
    return -1;
  }
  // An unnamed eager call: ranks pair these in the order they make them, and give them
  // names that never recur ("unnamed.<n>"), so the cache keys them by call site. While an
  // earlier call from the same site waits on the slot here, this one is negotiated. The
  // entry keeps its own name: the slot, not the name, pairs it with the cached response.
  const int slot = cache.Find(UnnamedCacheKey(q.key.call_site, q.key.set));
  if (slot < 0 || pending_.AtSlot(slot)) return -1;
  // The slot is the site's (found by it), and was cached from a request marked cacheable,
  // which this one (its name never recurs) is not: the rest must be the same.
  if (!cache.signature(slot).SameCollective(q)) {
    invalidate->push_back(slot);  // another shape (say) at the same line
    return -1;
  }
  return slot;
}

void Coordinator::NegotiateInstead(int slot) {
  Pending moved = pending_.TakeFromSlot(slot);
  moved.state = State::kToSend;
  std::string key = moved.entry.request.name;
  send_order_.push_back(key);
  pending_.by_name().emplace(std::move(key), std::move(moved));
}

}  // namespace tfring
