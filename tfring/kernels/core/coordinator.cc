// The coordinator's own code: its public calls, and the cycle that runs its parts' steps
// in order (coordinator.h).
#include "tfring/kernels/core/coordinator.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tfring/kernels/common/logging.h"
#include "tfring/kernels/core/cycle_bits.h"

namespace tfring {
namespace {

// How long after its last op the job counts as active (ControlPlane::SetActive): longer
// than the pause between most training steps.
constexpr auto kActiveFor = std::chrono::milliseconds(100);

}  // namespace

Coordinator::Coordinator(const Options& options, std::unique_ptr<ControlPlane> control_plane,
                         std::unique_ptr<Backend> backend,
                         std::unique_ptr<GroupExecutor> device_executor,
                         ProcessSetFactory process_sets)
    : options_(options),
      control_plane_(std::move(control_plane)),
      rank_(control_plane_->rank()),
      size_(control_plane_->size()),
      recorder_(std::make_shared<FlightRecorder>(options.flight_recorder_entries)),
      straggler_watch_(options, rank_, size_),
      intake_(rank_),
      driver_(options, &intake_, this),
      fusion_threshold_bytes_(options.fusion_threshold_bytes),
      cycle_time_ms_(options.cycle_time_ms),
      entries_(rank_, &timeline_, recorder_.get()),
      cache_sync_(options, rank_, size_),
      round_(options, rank_, size_),
      execution_(std::move(backend), rank_, size_, std::move(device_executor),
                 std::move(process_sets), options.fusion_alone_bytes, &timeline_,
                 recorder_.get(), &straggler_watch_),
      joined_ranks_(size_, false) {}

Status Coordinator::StartTimeline(const std::string& path, bool mark_cycles) {
  if (rank_ != 0) return Status::OK();
  return timeline_.Start(path, mark_cycles);
}

void Coordinator::StopTimeline() { timeline_.Stop(); }

TunedParams Coordinator::tuned_params() const {
  return {fusion_threshold_bytes_.load(), cycle_time_ms_.load()};
}

void Coordinator::ApplyParams(const ResponseList& list) {
  if (!list.has_params) return;
  fusion_threshold_bytes_.store(list.fusion_threshold_bytes);
  cycle_time_ms_.store(list.cycle_time_ms);
  round_.Applied();
  TFRING_LOG(kDebug) << "autotune: fusion threshold " << list.fusion_threshold_bytes
                     << " bytes, cycle time " << list.cycle_time_ms << " ms";
}

Coordinator::~Coordinator() { Shutdown(); }

void Coordinator::Start() {
  intake_.Open();
  round_.Start(SteadyClock::now());
  driver_.Start();
}

SteadyClock::duration Coordinator::cycle_time() const {
  return std::chrono::duration_cast<SteadyClock::duration>(
      std::chrono::duration<double, std::milli>(cycle_time_ms_.load(std::memory_order_relaxed)));
}

std::string Coordinator::PrepareEntry(Entry* e) const {
  Request& r = e->request;
  std::vector<int32_t>& set = r.key.set;
  if (!AreAscendingRanks(set, size_)) {
    TensorKey outside_sets = r.key;  // the set is what is wrong: named apart
    outside_sets.set.clear();
    return "the process set of '" + KeyString(outside_sets) + "', " + RankListString(set) +
           ", must list distinct ranks in [0, " + std::to_string(size_) + "), ascending";
  }
  if (static_cast<int>(set.size()) == size_) set.clear();  // all ranks: the global set
  r.name = KeyString(r.key);
  if (!set.empty() && !IsMember(set, rank_)) {
    return NotAMemberMessage(rank_, set, r.name);
  }
  if (!set.empty() && !execution_.supports_sets()) {
    return "tensor '" + r.name + "' is in a process set, which this runtime does not support";
  }
  if (r.kind == CollectiveKind::kBroadcast && !set.empty() && !IsMember(set, r.root_rank)) {
    return "broadcast '" + r.name + "': root_rank " + std::to_string(r.root_rank) +
           " is not in its process set " + RankListString(set);
  }
  return "";
}

void Coordinator::Enqueue(Entry entry, const OpCountdown* countdown) {
  std::vector<Entry> one;
  one.push_back(std::move(entry));
  EnqueueAll(std::move(one), countdown);
}

void Coordinator::EnqueueAll(std::vector<Entry> entries, const OpCountdown* countdown) {
  // The entries that pass stay where they are (in order, those after a failed one moved
  // up): no second vector, no second move of each entry.
  size_t kept = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string problem = PrepareEntry(&entries[i]);
    if (!problem.empty()) {
      entries[i].done(Status::InvalidArgument(problem));
      continue;
    }
    entries[i].flight_seq = recorder_->Submitted(entries[i].request, entries[i].created);
    if (kept != i) entries[kept] = std::move(entries[i]);
    ++kept;
  }
  entries.erase(entries.begin() + kept, entries.end());
  if (entries.empty()) return;
  if (entries[0].eager && countdown) {
    driver_.Drive(std::move(entries), *countdown);
  } else if (intake_.Put(&entries)) {
    intake_.Wake();
  }
}

void Coordinator::Shutdown() {
  intake_.RequestStop();
  driver_.Join();
}

bool Coordinator::stopped() const { return intake_.stopped(); }

bool Coordinator::peer_lost() const { return intake_.peer_lost(); }

Status Coordinator::RunCycle(bool* progress, bool* stop) {
  const auto now = SteadyClock::now();
  recorder_->CycleRan();
  cache_sync_.StartCycle();
  std::vector<int> invalidate;
  entries_.Take(&intake_, cache_sync_.cache(), now, &invalidate, progress);
  const bool force_round = round_.Due(now);

  // Step 2: one AND-allreduce of flags, ready and valid bits per cache slot, and per rank
  // a not-joined and a still-running bit (cycle_bits.h).
  const int nbits = cache_sync_.num_bits();
  CycleBits bits(nbits, size_);
  const bool shutting_down = intake_.stop_requested();
  PendingEntries& pending = entries_.pending();
  if (!entries_.has_requests_to_send() && !force_round) bits.SetNoNewRequests();
  if (entries_.joined()) bits.MarkJoined(rank_);
  if (shutting_down) bits.MarkStopping(rank_);
  if (!straggler_watch_.ExchangeDue(now)) bits.SetNoStragglerExchange();
  pending.ForEachWaiting([&](int slot, Pending&) { bits.SetReady(slot); });
  cache_sync_.MarkSlotsNotHeldUp(entries_.joined(), &bits);
  for (int slot : invalidate) bits.Invalidate(slot);
  if (!pending.empty()) last_work_ = now;
  control_plane_->SetActive(now - last_work_ < kActiveFor);
  TFRING_RETURN_IF_ERROR(control_plane_->AllreduceAnd(bits.words()));

  std::vector<bool> joined(size_);
  bool any_joined = false, all_joined = true;
  for (int r = 0; r < size_; ++r) {
    joined[r] = bits.joined(r);
    any_joined = any_joined || joined[r];
    all_joined = all_joined && joined[r];
  }
  const bool joined_changed = joined != joined_ranks_;

  CycleResponses execute;
  std::vector<int> erased;
  cache_sync_.TakeReady(bits, joined, any_joined, &execute, &erased);
  for (int slot : erased) {
    *progress = true;
    if (pending.AtSlot(slot)) entries_.NegotiateInstead(slot);  // negotiated under its own name
  }

  // Step 3: a negotiation round when any rank has new requests, or when who has joined
  // changed (tensors waiting for a rank that has now joined are complete).
  if (!bits.no_new_requests() || joined_changed) {
    round_.SetJoined(joined);
    TFRING_RETURN_IF_ERROR(Negotiate(&execute, stop));
    *progress = true;
  }

  // Step 4: execute.
  if (!execute.empty()) {
    *progress = true;
    Execute(execute);
  }
  straggler_watch_.EndCycle();
  if (all_joined && !*stop) {
    // The last to join: of the ranks that joined in this cycle, the highest.
    int32_t last = size_ - 1;
    for (int r = size_ - 1; r >= 0; --r) {
      if (!joined_ranks_[r]) {
        last = r;
        break;
      }
    }
    entries_.FinishJoins(last);
    *progress = true;
    joined.assign(size_, false);
    round_.SetJoined(joined);
  }
  joined_ranks_ = joined;
  if (*stop) return Status::OK();
  std::vector<int32_t> stopping;
  for (int r = 0; r < size_; ++r) {
    if (!bits.running(r)) stopping.push_back(r);
  }
  // Every rank sees the same bits, so every rank exchanges in this cycle, or none does.
  if (bits.straggler_exchange() && stopping.empty()) {
    TFRING_RETURN_IF_ERROR(straggler_watch_.Exchange(control_plane_.get(), &timeline_));
  }
  if (!stopping.empty()) {
    // A shutdown (this rank's or another's) is no failure: a dump only if ops were waiting.
    FailAll(Status::Aborted(
        shutting_down ? "tfring was shut down on this rank (rank " + std::to_string(rank_) +
                            ") while this op was pending"
                      : "tfring was shut down on " +
                            (stopping.size() == 1 ? "rank " + std::to_string(stopping[0])
                                                  : "ranks " + RankListString(stopping)) +
                            " while this op was pending"),
            /*always_dump=*/false);
    *stop = true;
  }
  return Status::OK();
}

Status Coordinator::Negotiate(CycleResponses* execute, bool* stop) {
  ResponseList list;
  TFRING_RETURN_IF_ERROR(round_.Run(control_plane_.get(), entries_.TakeRequestsToSend(), &list));
  ApplyParams(list);
  for (Response& r : list.responses) {
    // This rank's entry waiting on an evicted slot was not ready everywhere (a slot
    // executed in this cycle is never taken): negotiated from the next cycle on, as the
    // other ranks' will be.
    const int evicted = cache_sync_.Record(r);
    if (evicted >= 0 && entries_.pending().AtSlot(evicted)) entries_.NegotiateInstead(evicted);
    // Numbers of later unnamed calls agree again: after a call that failed (before it
    // returns to its caller), and after one this rank sat out while joined.
    if (!r.ok() || std::find(r.joined.begin(), r.joined.end(), rank_) != r.joined.end()) {
      unnamed_names_.CatchUp(r.key);
    }
    execute->Add(std::move(r));
  }
  if (!list.abort_message.empty()) {
    TFRING_LOG(kError) << list.abort_message;
    // What was decided before the abort still runs, as on every other rank; not through
    // Execute(): an aborting cycle records nothing for the timeline or the autotuner.
    execution_.Run(execute->order, fusion_threshold_bytes_.load(), &entries_);
    *execute = CycleResponses();
    FailEverything(Status::Aborted(list.abort_message));
    *stop = true;
  }
  return Status::OK();
}

void Coordinator::Execute(const CycleResponses& execute) {
  timeline_.MarkCycle();
  const PendingEntries& pending = entries_.pending();
  for (const CycleResponses::Item& item : execute.order) {
    if (!timeline_.active()) break;  // no lookup per tensor when nobody records
    const Pending* own = nullptr;  // this rank's own (a joined rank's stand-ins come later)
    if (item.slot >= 0) {
      own = pending.AtSlot(item.slot);
    } else {
      const auto it = pending.by_name().find(item.response->name);
      if (it != pending.by_name().end()) own = &it->second;
    }
    if (own != nullptr) timeline_.Phase(own->entry.request, "QUEUE");
  }
  const int64_t bytes =
      execution_.Run(execute.order, fusion_threshold_bytes_.load(), &entries_);
  timeline_.Flush();
  round_.Record(bytes);
}

void Coordinator::FailEverything(const Status& status) {
  failed_.store(true);
  FailAll(status, true);
}

void Coordinator::FailAll(const Status& failure, bool always_dump) {
  Status status = failure;
  // Written before the ops fail, so that it shows them waiting, and before any rank's code
  // sees the error (and may end its process); the error, this op's and later ones', says
  // where.
  if (failure_dump_ &&
      (always_dump || !entries_.pending().empty() || intake_.queued() > 0)) {
    status = Status(status.code(), status.message() + failure_dump_(status.message()));
  }
  std::vector<std::vector<Entry>> queued = intake_.Close(status);
  entries_.FailAll(status);
  for (std::vector<Entry>& op : queued) {
    for (Entry& e : op) {
      const Status named = NamingTensor(status, e.request.name, rank_);
      recorder_->Finished(e.flight_seq, named);
      e.done(named);
    }
  }
}

}  // namespace tfring
