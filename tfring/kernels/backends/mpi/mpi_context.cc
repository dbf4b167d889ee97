#include "tfring/kernels/backends/mpi/mpi_context.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "tfring/kernels/backends/mpi/mpi_check.h"
#include "tfring/kernels/core/message.h"

namespace tfring {
namespace {

// The name a rank gives its host: TFRING_HOSTID where set (docs/settings.md; as NCCL_HOSTID
// does for NCCL, it lets ranks of one machine count as hosts of their own: containers that
// should, or a hierarchical allreduce tried on one machine), else the hostname. Names given
// by TFRING_HOSTID start with '\x01', which no hostname does, so that the two never meet.
std::string HostName() {
  constexpr int kName = 256;
  const char* id = std::getenv("TFRING_HOSTID");
  if (id != nullptr && *id != '\0') return std::string("\x01") + id;
  std::vector<char> name(kName, '\0');
  gethostname(name.data(), kName - 1);
  return std::string(name.data());
}

// The host of each rank of `parent`, as a group number (the lowest rank on that host): the
// ranks are joined when their host names are equal, and, for ranks without TFRING_HOSTID,
// when MPI's shared-memory split puts them together. MPI's split alone is not enough: under
// Slurm's direct launch (`srun --mpi=pmix`, Slurm 22.05, Open MPI 5) PMIx tells Open MPI
// nothing of locality, and every rank comes out alone on its "host" (local_rank 0
// everywhere: every rank would pin GPU 0). The hostname alone is not enough either where one
// machine's processes carry different names (containers with their own UTS namespace share
// memory only if MPI says so).
Status HostGroups(MPI_Comm parent, int rank, int size, std::vector<int>* group) {
  MPI_Comm shared;
  TFRING_MPI_CHECK(
      MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared));
  int shared_leader = rank;
  const int rc = MPI_Allreduce(MPI_IN_PLACE, &shared_leader, 1, MPI_INT, MPI_MIN, shared);
  MPI_Comm_free(&shared);
  TFRING_MPI_CHECK(rc);
  constexpr int kName = 256;
  std::vector<char> mine(kName, '\0'), names(static_cast<size_t>(kName) * size);
  const std::string host = HostName();
  std::copy_n(host.begin(), std::min<size_t>(host.size(), kName - 1), mine.begin());
  std::vector<int> leaders(size);
  TFRING_MPI_CHECK(MPI_Allgather(mine.data(), kName, MPI_CHAR, names.data(), kName, MPI_CHAR,
                                 parent));
  TFRING_MPI_CHECK(
      MPI_Allgather(&shared_leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, parent));
  std::vector<std::string> hostnames(size);
  for (int r = 0; r < size; ++r) {
    hostnames[r] = std::string(&names[static_cast<size_t>(r) * kName]);
  }
  auto named = [&hostnames](int r) {
    return !hostnames[r].empty() && hostnames[r][0] == '\x01';
  };
  // Union-find over ranks, each root the lowest rank of its group.
  group->resize(size);
  for (int r = 0; r < size; ++r) (*group)[r] = r;
  auto root = [group](int r) {
    while ((*group)[r] != r) r = (*group)[r];
    return r;
  };
  auto join = [&](int a, int b) {
    a = root(a);
    b = root(b);
    if (a != b) (*group)[std::max(a, b)] = std::min(a, b);
  };
  for (int r = 0; r < size; ++r) {
    if (!named(r) && !named(leaders[r])) join(r, leaders[r]);
    for (int q = 0; q < r; ++q) {
      if (hostnames[q] == hostnames[r]) {
        join(r, q);
        break;
      }
    }
  }
  for (int r = 0; r < size; ++r) (*group)[r] = root(r);
  return Status::OK();
}

// The ranks of `parent` on this rank's host, in rank order (HostGroups).
Status SplitByHost(MPI_Comm parent, int rank, MPI_Comm* local) {
  int size = 0;
  TFRING_MPI_CHECK(MPI_Comm_size(parent, &size));
  std::vector<int> group;
  TFRING_RETURN_IF_ERROR(HostGroups(parent, rank, size, &group));
  TFRING_MPI_CHECK(MPI_Comm_split(parent, group[rank], rank, local));
  return Status::OK();
}

}  // namespace

Status MpiContext::ComputeLayout() {
  ProcessLayout* l = &layout_;
  TFRING_MPI_CHECK(MPI_Comm_rank(world_, &l->rank));
  TFRING_MPI_CHECK(MPI_Comm_size(world_, &l->size));
  MPI_Comm local, cross;
  TFRING_RETURN_IF_ERROR(SplitByHost(world_, l->rank, &local));
  TFRING_MPI_CHECK(MPI_Comm_rank(local, &l->local_rank));
  TFRING_MPI_CHECK(MPI_Comm_size(local, &l->local_size));
  TFRING_MPI_CHECK(MPI_Comm_split(world_, l->local_rank, l->rank, &cross));
  TFRING_MPI_CHECK(MPI_Comm_rank(cross, &l->cross_rank));
  TFRING_MPI_CHECK(MPI_Comm_size(cross, &l->cross_size));
  MPI_Comm_free(&local);
  MPI_Comm_free(&cross);
  return Status::OK();
}

// Makes world_ for `choice` (MPI is initialized), freeing the previous one.
Status MpiContext::MakeWorld(const WorldChoice& choice) {
  if (world_ != MPI_COMM_WORLD) MPI_Comm_free(&world_);
  world_ = MPI_COMM_WORLD;
  MPI_Comm made = MPI_COMM_NULL;
  switch (choice.kind) {
    case WorldChoice::Kind::kAll:
      return Status::OK();
    case WorldChoice::Kind::kRanks: {
      int me = 0, size = 0;
      TFRING_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me));
      TFRING_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
      bool member = false;
      for (int32_t r : choice.ranks) {
        if (r < 0 || r >= size) {
          return Status::InvalidArgument("init(comm=...): rank " + std::to_string(r) +
                                         " is not a rank of MPI_COMM_WORLD (size " +
                                         std::to_string(size) + ")");
        }
        member = member || r == me;
      }
      if (!member) {
        return Status::InvalidArgument("init(comm=" + RankListString(choice.ranks) +
                                       "): this process (MPI_COMM_WORLD rank " +
                                       std::to_string(me) + ") is not one of those ranks");
      }
      MPI_Group world_group, group;
      TFRING_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
      TFRING_MPI_CHECK(MPI_Group_incl(world_group, static_cast<int>(choice.ranks.size()),
                                      choice.ranks.data(), &group));
      const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, /*tag=*/7300, &made);
      MPI_Group_free(&group);
      MPI_Group_free(&world_group);
      TFRING_MPI_CHECK(rc);
      break;
    }
    case WorldChoice::Kind::kCommunicator: {
      const MPI_Comm given = MPI_Comm_f2c(static_cast<MPI_Fint>(choice.fortran_handle));
      if (given == MPI_COMM_NULL) {
        return Status::InvalidArgument("init(comm=...): the communicator is MPI_COMM_NULL");
      }
      // A duplicate: tfring's messages never match the application's on its communicator.
      TFRING_MPI_CHECK(MPI_Comm_dup(given, &made));
      break;
    }
  }
  TFRING_MPI_CHECK(MPI_Comm_set_errhandler(made, MPI_ERRORS_RETURN));
  world_ = made;
  return Status::OK();
}

namespace {
// tfring's rank, for MpiStatus: every other error names tfring's rank, which under
// init(comm=...) is not the MPI_COMM_WORLD rank, and the MPI calls that fail are too many
// and too deep to be handed it. -1 until a world is made.
std::atomic<int> g_tfring_rank{-1};
}  // namespace

Status MpiStatus(int rc, const char* call, const char* file, int line) {
  // `call` is the whole C++ expression; its MPI function is what a reader needs.
  std::string function(call);
  function = function.substr(0, function.find('('));
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  int initialized = 0, finalized = 0, world_rank = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const int rank = g_tfring_rank.load(std::memory_order_relaxed);
  std::string who = "rank " + std::to_string(rank >= 0 ? rank : world_rank);
  if (rank >= 0 && rank != world_rank) {
    who += " (MPI_COMM_WORLD rank " + std::to_string(world_rank) + ")";
  }
  std::string where(file);
  where = where.substr(where.find_last_of('/') + 1);
  return Status::Internal(function + " failed on " + who + ": " +
                          std::string(text, len) + " (" + where + ":" + std::to_string(line) +
                          ")");
}

Status MpiContext::Initialize(const WorldChoice& choice, ProcessLayout* layout) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    return Status::FailedPrecondition(
        "MPI was already finalized in this process; tfring cannot start again after MPI "
        "has been shut down");
  }
  if (!initialized) {
    // Open MPI spins while it waits for a peer. A tfring rank shares its core(s) with
    // TensorFlow's threads, which computes the next gradients while a collective waits;
    // a spinning wait takes that CPU away. Yielding costs a syscall per poll, which a
    // training step gains back many times over (docs/settings.md has the figures).
    // A value the user set wins; other MPIs ignore the variable.
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
    TFRING_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level_));
    we_initialized_ = true;
  } else {
    MPI_Query_thread(&thread_level_);
  }
  TFRING_RETURN_IF_ERROR(MakeWorld(choice));
  TFRING_RETURN_IF_ERROR(ComputeLayout());
  g_tfring_rank.store(layout_.rank, std::memory_order_relaxed);
  *layout = layout_;
  return Status::OK();
}

void MpiContext::Finalize() {
  if (we_initialized_) FinalizeAnyway();
}

void MpiContext::FinalizeAnyway() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
  we_initialized_ = false;
}

Status MpiContext::DupWorld(MPI_Comm* comm) const {
  TFRING_MPI_CHECK(MPI_Comm_dup(world_, comm));
  TFRING_MPI_CHECK(MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN));
  return Status::OK();
}

Status MpiContext::SplitLocal(MPI_Comm* comm) const {
  TFRING_RETURN_IF_ERROR(SplitByHost(world_, layout_.rank, comm));
  TFRING_MPI_CHECK(MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN));
  return Status::OK();
}

Status MpiContext::SplitCross(MPI_Comm* comm) const {
  TFRING_MPI_CHECK(MPI_Comm_split(world_, layout_.local_rank, layout_.rank, comm));
  TFRING_MPI_CHECK(MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN));
  return Status::OK();
}

Status MpiContext::SplitWithin(MPI_Comm parent, MPI_Comm* dup, MPI_Comm* local, MPI_Comm* cross,
                               ProcessLayout* l) {
  TFRING_MPI_CHECK(MPI_Comm_rank(parent, &l->rank));
  TFRING_MPI_CHECK(MPI_Comm_size(parent, &l->size));
  TFRING_MPI_CHECK(MPI_Comm_dup(parent, dup));
  TFRING_RETURN_IF_ERROR(SplitByHost(parent, l->rank, local));
  TFRING_MPI_CHECK(MPI_Comm_rank(*local, &l->local_rank));
  TFRING_MPI_CHECK(MPI_Comm_size(*local, &l->local_size));
  TFRING_MPI_CHECK(MPI_Comm_split(parent, l->local_rank, l->rank, cross));
  TFRING_MPI_CHECK(MPI_Comm_rank(*cross, &l->cross_rank));
  TFRING_MPI_CHECK(MPI_Comm_size(*cross, &l->cross_size));
  for (MPI_Comm* c : {dup, local, cross}) {
    TFRING_MPI_CHECK(MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN));
  }
  return Status::OK();
}

Status MpiContext::CreateGroup(MPI_Comm world, const std::vector<int32_t>& ranks,
                               MPI_Comm* comm) {
  MPI_Group world_group, group;
  TFRING_MPI_CHECK(MPI_Comm_group(world, &world_group));
  TFRING_MPI_CHECK(MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(),
                                  &group));
  // The tag tells apart creations that share processes; members create their sets one at
  // a time, in the same order, so a fixed tag is enough.
  const int rc = MPI_Comm_create_group(world, group, /*tag=*/7301, comm);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  TFRING_MPI_CHECK(rc);
  TFRING_MPI_CHECK(MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN));
  return Status::OK();
}

std::string MpiContext::LibraryVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, len);
  const size_t eol = s.find_first_of(",\n");
  return eol == std::string::npos ? s : s.substr(0, eol);
}

}  // namespace tfring
