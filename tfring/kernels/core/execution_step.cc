// The execution step (execution_step.h): set by set, fusion group by fusion group.
#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tfring/kernels/common/logging.h"
#include "tfring/kernels/core/buffer_layout.h"
#include "tfring/kernels/core/execution_step.h"
#include "tfring/kernels/core/fusion.h"
#include "tfring/kernels/core/joined_stand_ins.h"

namespace tfring {
namespace {

int PositionIn(const std::vector<int32_t>& members, int rank) {
  return static_cast<int>(std::lower_bound(members.begin(), members.end(), rank) -
                          members.begin());
}

// Bytes a response moves through the fusion buffer (the same on every rank).
int64_t ResponseBytes(const Response& r) {
  if (r.kind != CollectiveKind::kAllgather) return TensorBytes(r);
  int64_t rows = 0;
  for (int64_t d : r.first_dims) rows += d;
  return rows * RowBytes(r);
}

// A backend's failure, said where it happened: the collective, its tensors and this rank.
// Backends know buffers, not names; this is the one place that knows both.
Status FailureWhere(const Status& s, const std::vector<const Response*>& group, int rank) {
  std::string names;
  const size_t shown = std::min<size_t>(group.size(), 3);
  for (size_t i = 0; i < shown; ++i) names += (i ? ", '" : "'") + group[i]->name + "'";
  if (group.size() > shown) names += " and " + std::to_string(group.size() - shown) + " more";
  return Status(s.code(), std::string(CollectiveKindName(group[0]->kind)) + " of " + names +
                              " failed on rank " + std::to_string(rank) + ": " + s.message());
}

}  // namespace

ExecutionStep::ExecutionStep(std::unique_ptr<Backend> backend, int rank, int size,
                             std::unique_ptr<GroupExecutor> device,
                             ProcessSetFactory process_sets, int64_t fusion_alone_bytes,
                             Timeline* timeline, FlightRecorder* recorder,
                             StragglerWatch* straggler_watch)
    : rank_(rank),
      size_(size),
      all_ranks_(SetMembers({}, size)),
      fusion_alone_bytes_(fusion_alone_bytes),
      timeline_(timeline),
      recorder_(recorder),
      straggler_watch_(straggler_watch),
      executors_(std::move(backend), rank, size, std::move(device), std::move(process_sets),
                 timeline) {}

int64_t ExecutionStep::Run(const CycleItems& responses, int64_t fusion_threshold_bytes,
                           CycleEntries* entries) {
  bool all_global = true;
  for (const auto& item : responses) all_global = all_global && item.response->key.set.empty();
  if (all_global) {  // without the sorting below
    return RunInSet(all_ranks_, responses, fusion_threshold_bytes, entries);
  }
  // Set by set, in the order the sets first appear: the same on every rank.
  std::vector<std::vector<int32_t>> order;
  std::map<std::vector<int32_t>, CycleItems> by_set;
  for (const auto& item : responses) {
    auto& list = by_set[item.response->key.set];
    if (list.empty()) order.push_back(item.response->key.set);
    list.push_back(item);
  }
  int64_t bytes = 0;
  for (const std::vector<int32_t>& set : order) {
    const std::vector<int32_t> members = SetMembers(set, size_);
    if (IsMember(members, rank_)) {
      bytes += RunInSet(members, by_set[set], fusion_threshold_bytes, entries);
    }
  }
  return bytes;
}

int64_t ExecutionStep::RunInSet(const std::vector<int32_t>& members,
                                const CycleItems& responses, int64_t fusion_threshold_bytes,
                                CycleEntries* entries) {
  const int position = PositionIn(members, rank_);
  const int set_size = static_cast<int>(members.size());
  std::unique_ptr<JoinedStandIns> stand_ins;  // made when this rank has joined and needs them
  // What the executors see: the responses as they are, or a copy where one must change (a
  // broadcast's root, as its position in a smaller set).
  std::vector<const Response*> runs;
  runs.reserve(responses.size());
  std::deque<Response> changed;
  std::vector<Entry*> run_entries;
  run_entries.reserve(responses.size());
  // Where each of this rank's own entries is held: its cache slot, or its place in
  // the table by name (nothing is added there during execution, and erasing one entry
  // leaves the others' places valid: cycle_entries.h). Neither: a joined rank's stand-in.
  struct Owner {
    int slot = -1;
    bool by_name = false;
    CycleEntries::Table::iterator it;
  };
  PendingEntries& pending = entries->pending();
  const auto finish_owned = [entries](const Owner& o, const Status& status) {
    if (o.slot >= 0) {
      entries->FinishAtSlot(o.slot, status);
    } else {
      entries->Finish(o.it, status);
    }
  };
  std::vector<Owner> owners;
  owners.reserve(responses.size());
  const auto agreed = SteadyClock::now();
  for (const CycleResponses::Item& item : responses) {
    const Response* rp = item.response;
    Owner owner;
    Entry* own = nullptr;
    if (item.slot >= 0 && pending.AtSlot(item.slot)) {
      owner.slot = item.slot;
      own = &pending.AtSlot(item.slot)->entry;
    } else if (item.slot < 0) {
      auto it = pending.by_name().find(rp->name);
      if (it != pending.by_name().end() && it->second.state != PendingState::kJoined) {
        owner.by_name = true;
        owner.it = it;
        own = &it->second.entry;
      }
    }
    if (own) {
      recorder_->Agreed(own->flight_seq, agreed);
      straggler_watch_->Agreed(own->created, agreed, own->request);
    }
    const std::string error = rp->ok() ? JoinedProblem(*rp) : rp->error;
    if (!error.empty()) {
      // FailedPrecondition, as Horovod: the ranks disagree, which no argument of one rank fixes.
      if (own) finish_owned(owner, Status::FailedPrecondition(error));
      continue;
    }
    TFRING_CHECK(own || entries->joined())
        << "response for '" << rp->name << "' which is not pending";
    const Response* r = rp;
    if (r->kind == CollectiveKind::kBroadcast) {
      const int root_position = PositionIn(members, r->root_rank);
      if (root_position != r->root_rank) {
        changed.push_back(*r);
        changed.back().root_rank = root_position;
        r = &changed.back();
      }
    }
    runs.push_back(r);
    if (!own && !stand_ins) stand_ins = std::make_unique<JoinedStandIns>();
    run_entries.push_back(own ? own : stand_ins->For(*r, position, set_size));
    owners.push_back(owner);
  }
  std::vector<FusionItem> items;
  items.reserve(runs.size());
  int64_t executed_bytes = 0;
  for (const Response* r : runs) {
    items.push_back({r, ResponseBytes(*r)});
    executed_bytes += items.back().bytes;
  }
  GroupExecutor* host = nullptr;
  GroupExecutor* device = nullptr;
  const Status made = executors_.For(members, &host, &device);
  for (const std::vector<int>& group :
       PlanFusion(items, fusion_threshold_bytes, fusion_alone_bytes_)) {
    std::vector<Entry*> es;
    std::vector<const Response*> rs;
    for (int i : group) {
      es.push_back(run_entries[i]);
      rs.push_back(items[i].response);
    }
    const Response& head = *rs[0];
    const auto started = SteadyClock::now();
    for (const Entry* e : es) recorder_->Started(e->flight_seq, started);
    GroupExecutor* executor = head.on_device ? device : host;
    Status s;
    if (!made.ok()) {
      s = Status(made.code(), "setting up process set " + RankListString(members) + ": " +
                                  made.message());
    } else if (head.kind == CollectiveKind::kBarrier) {
      // Negotiation completed it: every rank has submitted it.
    } else if (executor == nullptr) {
      s = Status::FailedPrecondition(
          "tensor '" + head.name + "' is in GPU memory, but this tfring build has no GPU path "
          "(built without NCCL; see BUILD.md, 'GPU (NCCL)')");
    } else {
      switch (head.kind) {
        case CollectiveKind::kAllreduce: s = executor->Allreduce(es, head); break;
        case CollectiveKind::kAllgather: s = executor->Allgather(es, rs); break;
        case CollectiveKind::kBroadcast: s = executor->Broadcast(es, head); break;
        case CollectiveKind::kReducescatter: s = executor->Reducescatter(es, head); break;
        case CollectiveKind::kAlltoall: s = executor->Alltoall(es, head); break;
        case CollectiveKind::kBarrier:
        case CollectiveKind::kJoin: break;
      }
      if (!s.ok()) s = FailureWhere(s, rs, rank_);
    }
    TFRING_LOG(kTrace) << (executor ? executor->name() : "no executor") << " "
                       << CollectiveKindName(head.kind) << " of " << rs.size() << " tensor(s), "
                       << "first '" << head.name << "': "
                       << std::chrono::duration<double, std::micro>(SteadyClock::now() - started)
                              .count()
                       << " us";
    for (int i : group) {
      if (owners[i].slot >= 0 || owners[i].by_name) {
        finish_owned(owners[i], s);
      } else {
        timeline_->End(run_entries[i]->request);  // a joined rank's stand-in
      }
    }
  }
  return executed_bytes;
}

}  // namespace tfring
