#include "tfring/kernels/core/cycle_entries.h"

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tfring/kernels/common/logging.h"
#include "tfring/kernels/core/message.h"
#include "tfring/kernels/core/tensor_key.h"

namespace tfring {
namespace {

// A cached entry that waited this long gives up its slot and is negotiated.
constexpr double kCachedWaitDemoteSeconds = 1.0;

}  // namespace

void CycleEntries::Take(Intake* intake, const ResponseCache& cache, SteadyClock::time_point now,
                        std::vector<int>* invalidate, bool* progress) {
  intake->Take(&taken_);  // taken_ is empty; its capacity is reused
  PrefetchSlots(cache);
  for (std::vector<Entry>& op : taken_) {
    for (Entry& e : op) {
      *progress = true;
      TakeOne(&e, cache, now, invalidate);
    }
  }
  taken_.clear();  // each entry moved into pending_ or failed
  // A cached entry that waited long gives up its slot: rank 0 then sees it in negotiation,
  // where the stall inspector can name the ranks that have not submitted it.
  pending_.ForEachWaiting([&](int slot, Pending& p) {
    if (std::chrono::duration<double>(now - p.since).count() > kCachedWaitDemoteSeconds) {
      invalidate->push_back(slot);
    }
  });
}

void CycleEntries::TakeOne(Entry* entry, const ResponseCache& cache,
                           SteadyClock::time_point now, std::vector<int>* invalidate) {
  Entry& e = *entry;
  const std::string& name = e.request.name;  // an unnamed call's own, "unnamed.<n>"
  const auto refuse = [this, &e](const Status& status) {
    recorder_->Finished(e.flight_seq, status);
    e.done(status);
  };
  if (e.request.kind == CollectiveKind::kJoin && joined_) {
    refuse(Status::FailedPrecondition("join() is already pending on rank " +
                                      std::to_string(rank_)));
    return;
  }
  // A named entry's cache slot, from its kernel's ticket or found by name, once: it also
  // says whether an entry of that name waits there already.
  const int named_slot = CachedByCallSite(e.request) ? -1 : NamedSlot(e, cache);
  if ((named_slot >= 0 && pending_.AtSlot(named_slot)) || pending_.HasName(name)) {
    refuse(Status::InvalidArgument(
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
    recorder_->Taken(e.flight_seq, now);
    HoldByName(&e, State::kJoined, now);
    return;
  }
  if (joined_) {
    refuse(Status::FailedPrecondition(
        "rank " + std::to_string(rank_) + " has joined (tfring.join) and cannot run '" + name +
        "' until every rank has joined"));
    return;
  }
  const int slot = CachedSlotFor(&e, cache, named_slot, invalidate);
  timeline_->Submitted(e.request, e.created);
  timeline_->Phase(e.request, "NEGOTIATE");
  recorder_->Taken(e.flight_seq, now);
  if (slot >= 0) {
    pending_.PlaceAtSlot(slot, std::move(e), now);
    return;
  }
  send_order_.push_back(name);
  HoldByName(&e, State::kToSend, now);
}

void CycleEntries::HoldByName(Entry* e, State state, SteadyClock::time_point now) {
  std::string key = e->request.name;
  pending_.by_name().emplace(std::piecewise_construct, std::forward_as_tuple(std::move(key)),
                             std::forward_as_tuple(std::move(*e), state, now));
}

void CycleEntries::PrefetchSlots(const ResponseCache& cache) const {
  const auto each_ticket = [&](auto fn) {
    for (const std::vector<Entry>& op : taken_) {
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
  each_ticket([&](const CacheTicket* t) {
    const int slot = slot_of(t);
    cache.Prefetch(slot, /*deep=*/false);
    pending_.PrefetchSlot(slot);
  });
  each_ticket([&](const CacheTicket* t) { cache.Prefetch(slot_of(t), /*deep=*/true); });
}

int CycleEntries::NamedSlot(const Entry& e, const ResponseCache& cache) {
  if (e.cache_ticket != nullptr) {
    const uint64_t ticket = e.cache_ticket->value.load(std::memory_order_relaxed);
    const int slot = CacheTicket::SlotOf(ticket);
    const uint32_t generation = CacheTicket::GenerationOf(ticket);
    // Unchanged since it was issued for this name (a ticket serves one name: entry.h), so
    // it still holds this name: no compare of names, whose strings are cold in the CPU's
    // caches after a step's copies (docs/benchmarks-allreduce.md).
    if (cache.Holds(slot, generation)) return slot;
  }
  return cache.Find(e.request.name);
}

int CycleEntries::CachedSlotFor(Entry* e, const ResponseCache& cache, int named_slot,
                                std::vector<int>* invalidate) const {
  const Request& q = e->request;
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

void CycleEntries::NegotiateInstead(int slot) {
  Pending moved = pending_.TakeFromSlot(slot);
  moved.state = State::kToSend;
  std::string key = moved.entry.request.name;
  send_order_.push_back(key);
  pending_.by_name().emplace(std::move(key), std::move(moved));
}

std::vector<Request> CycleEntries::TakeRequestsToSend() {
  std::vector<Request> mine;
  for (const std::string& name : send_order_) {
    auto it = pending_.by_name().find(name);
    if (it == pending_.by_name().end() || it->second.state != State::kToSend) continue;
    it->second.state = State::kSent;
    mine.push_back(it->second.entry.request);
  }
  send_order_.clear();
  return mine;
}

void CycleEntries::FinishJoins(int32_t last) {
  joined_ = false;
  std::vector<std::string> joins;
  for (const auto& kv : pending_.by_name()) {
    if (kv.second.state == State::kJoined) joins.push_back(kv.first);
  }
  for (const std::string& name : joins) {
    Entry& e = pending_.by_name().at(name).entry;
    if (e.output != nullptr) *static_cast<int32_t*>(e.output) = last;
    Finish(name, Status::OK());
  }
}

void CycleEntries::Finish(const std::string& name, const Status& status) {
  auto it = pending_.by_name().find(name);
  TFRING_CHECK(it != pending_.by_name().end()) << "finishing '" << name << "' which is not pending";
  Finish(it, status);
}

void CycleEntries::Finish(Table::iterator it, const Status& status) {
  auto done = std::move(it->second.entry.done);
  timeline_->End(it->second.entry.request);
  recorder_->Finished(it->second.entry.flight_seq, status);
  pending_.by_name().erase(it);
  done(status);
}

void CycleEntries::FinishAtSlot(int slot, const Status& status) {
  Pending* p = pending_.AtSlot(slot);
  auto done = std::move(p->entry.done);
  timeline_->End(p->entry.request);
  recorder_->Finished(p->entry.flight_seq, status);
  pending_.EraseAtSlot(slot);  // where it is: no move of the entry
  done(status);
}

void CycleEntries::FailAll(const Status& status) {
  std::vector<std::string> names;
  for (const auto& kv : pending_.by_name()) names.push_back(kv.first);
  for (const auto& n : names) Finish(n, NamingTensor(status, n, rank_));
  for (int slot : pending_.WaitingSlots()) {
    FinishAtSlot(slot, NamingTensor(status, pending_.AtSlot(slot)->entry.request.name, rank_));
  }
  send_order_.clear();
}

}  // namespace tfring
