#include "tests/cpp/host_gpu/host_nccl_comm.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace host_gpu {
namespace {

using Clock = std::chrono::steady_clock;

// How long a rank waits for its peers to reach the communicator's init (NCCL's own
// bootstrap waits about as long before it gives up).
constexpr auto kConnectTimeout = std::chrono::seconds(120);

struct Header {
  uint32_t magic;
  uint32_t kind;
  uint64_t bytes;
};
constexpr uint32_t kMagic = 0x7466686e;  // "tfhn"
constexpr uint32_t kTaken = 0x74616b65;  // "take": a receive took a message (no payload)

// TFRING_HOST_GPU_MB_PER_SECOND: each connection moves at most this many MB a second (0:
// as fast as it can), so that a collective lasts long enough for a test to act in it (kill
// a rank mid-allreduce) without moving gigabytes.
double BytesPerSecond() {
  static const double rate = [] {
    const char* text = std::getenv("TFRING_HOST_GPU_MB_PER_SECOND");
    return text != nullptr ? std::atof(text) * 1e6 : 0.0;
  }();
  return rate;
}

bool WriteAll(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  const double rate = BytesPerSecond();
  while (bytes > 0) {
    // Slowed: 64 KiB at a time, each after its share of the time.
    const size_t chunk = rate > 0 ? std::min<size_t>(bytes, 64 << 10) : bytes;
    if (rate > 0) std::this_thread::sleep_for(std::chrono::duration<double>(chunk / rate));
    const ssize_t n = send(fd, p, chunk, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t bytes) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = recv(fd, p, bytes, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

// This process's host as NCCL tells hosts apart: NCCL_HOSTID where set, else its name; a
// fixed-size field in Connect's greeting.
struct HostName {
  char text[64] = {};
};

HostName ThisHost() {
  HostName h;
  const char* id = std::getenv("NCCL_HOSTID");
  if (id != nullptr && *id != '\0') {
    std::strncpy(h.text, id, sizeof(h.text) - 1);
  } else if (gethostname(h.text, sizeof(h.text) - 1) != 0) {
    std::strncpy(h.text, "localhost", sizeof(h.text) - 1);
  }
  return h;
}

// An abstract Unix socket's address (no file to clean up): a leading NUL, then the name.
socklen_t Address(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

}  // namespace

std::string CommState::SocketName(int rank) const {
  // The id's first bytes are the text ncclGetUniqueId wrote: unique per communicator.
  return std::string(id_.internal, strnlen(id_.internal, 64)) + "." + std::to_string(rank);
}

CommState::~CommState() {
  Abort();
  for (auto& p : peers_) {
    if (p && p->fd >= 0) close(p->fd);  // only now: a late send must not hit a reused fd
  }
}

ncclResult_t CommState::Fail(ncclResult_t rc, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (revoked()) return ncclInvalidUsage;  // quiescent: what revoked calls meet is no error
  if (last_error_.empty()) last_error_ = why;
  ncclResult_t expected = ncclSuccess;
  async_error_.compare_exchange_strong(expected, rc);
  expected = ncclInProgress;
  async_error_.compare_exchange_strong(expected, rc);
  return rc;
}

void CommState::Launched() {
  ncclResult_t expected = ncclSuccess;
  if (!async_error_.compare_exchange_strong(expected, ncclInProgress)) return;
  // NCCL's host side of a launch on a non-blocking communicator ends shortly after: until
  // then the communicator reports ncclInProgress and takes no other call.
  std::thread([self = shared_from_this()] {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    ncclResult_t in_progress = ncclInProgress;
    self->async_error_.compare_exchange_strong(in_progress, ncclSuccess);
  }).detach();
}

std::string CommState::last_error() {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

ncclResult_t CommState::Connect() {
  peers_.resize(size_);
  for (int p = 0; p < size_; ++p) peers_[p].reset(new Peer);
  if (size_ == 1) return ncclSuccess;
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr;
  socklen_t len = Address(SocketName(rank_), &addr);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(listener, size_) != 0) {
    if (listener >= 0) close(listener);
    return Fail(ncclSystemError, "cannot listen on " + SocketName(rank_) + ": " + strerror(errno));
  }
  const auto deadline = Clock::now() + kConnectTimeout;
  const HostName mine = ThisHost();
  host_ = std::string(mine.text, strnlen(mine.text, sizeof(mine.text)));
  // Lower ranks are connected to, higher ones accepted: each pair once; each tells the other
  // its host.
  for (int p = 0; p < rank_; ++p) {
    while (true) {
      if (aborted()) {
        close(listener);
        return Fail(ncclInvalidUsage, "the communicator was aborted during its init");
      }
      const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      len = Address(SocketName(p), &addr);
      if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
        const int32_t me = rank_;
        HostName theirs;
        if (!WriteAll(fd, &me, sizeof(me)) || !WriteAll(fd, &mine, sizeof(mine)) ||
            !ReadAll(fd, &theirs, sizeof(theirs))) {
          close(fd);
          close(listener);
          return Fail(ncclRemoteError, "rank " + std::to_string(p) + " closed the connection "
                                       "during the communicator's init");
        }
        peers_[p]->fd = fd;
        peers_[p]->host.assign(theirs.text, strnlen(theirs.text, sizeof(theirs.text)));
        break;
      }
      if (fd >= 0) close(fd);
      if (Clock::now() > deadline) {
        close(listener);
        return Fail(ncclRemoteError, "rank " + std::to_string(p) + " did not join the "
                                     "communicator's init");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  for (int accepted = 0; accepted < size_ - 1 - rank_;) {
    pollfd pfd{listener, POLLIN, 0};
    if (poll(&pfd, 1, 50) <= 0) {
      if (aborted() || Clock::now() > deadline) {
        close(listener);
        return Fail(aborted() ? ncclInvalidUsage : ncclRemoteError,
                    "a higher rank did not join the communicator's init");
      }
      continue;
    }
    const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    int32_t who = -1;
    HostName theirs;
    if (fd < 0 || !ReadAll(fd, &who, sizeof(who)) || !ReadAll(fd, &theirs, sizeof(theirs)) ||
        who <= rank_ || who >= size_ || peers_[who]->fd >= 0 ||
        !WriteAll(fd, &mine, sizeof(mine))) {
      if (fd >= 0) close(fd);
      close(listener);
      return Fail(ncclInternalError, "a bad connection during the communicator's init");
    }
    peers_[who]->fd = fd;
    peers_[who]->host.assign(theirs.text, strnlen(theirs.text, sizeof(theirs.text)));
    ++accepted;
  }
  close(listener);
  if (aborted()) return Fail(ncclInvalidUsage, "the communicator was aborted during its init");
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) peers_[p]->reader = std::thread(&CommState::Read, this, p);
  }
  return ncclSuccess;
}

void CommState::Read(int peer) {
  Peer& p = *peers_[peer];
  while (true) {
    Header h;
    Message m;
    bool ok = ReadAll(p.fd, &h, sizeof(h)) && h.magic == kMagic;
    if (ok) {
      m.kind = h.kind;
      m.bytes.resize(h.bytes);
      ok = ReadAll(p.fd, m.bytes.data(), h.bytes);
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!ok) {
      p.closed = true;
      cv_.notify_all();
      lock.unlock();
      if (p.host != host_ && !aborted() && !revoked()) {
        Fail(ncclRemoteError, "remote process exited or there was a network error: rank " +
                                  std::to_string(peer) + " on host " + p.host +
                                  " closed its connection");
      }
      return;
    }
    if (m.kind == kTaken) {
      ++p.taken;
    } else {
      p.inbox.push_back(std::move(m));
    }
    cv_.notify_all();
  }
}

ncclResult_t CommState::Send(int peer, uint32_t kind, const void* data, size_t bytes) {
  if (aborted() || revoked()) return ncclInvalidUsage;
  if (peer < 0 || peer >= size_) {
    return Fail(ncclInvalidArgument, "a send to rank " + std::to_string(peer));
  }
  if (peer == rank_) {  // to itself (NCCL pairs it with a receive in the same group)
    Message m;
    m.kind = kind;
    m.bytes.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    std::lock_guard<std::mutex> lock(mu_);
    peers_[peer]->inbox.push_back(std::move(m));
    cv_.notify_all();
    return ncclSuccess;
  }
  Peer& p = *peers_[peer];
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++p.sent;
  }
  std::lock_guard<std::mutex> lock(p.send_mu);
  const Header h{kMagic, kind, bytes};
  if (!WriteAll(p.fd, &h, sizeof(h)) || !WriteAll(p.fd, data, bytes)) {
    // A peer that is gone: as NCCL over NVLink or shared memory, nothing says so; the
    // collective waits (kLost) until this rank aborts or revokes it.
    return aborted() ? ncclInvalidUsage : kLost;
  }
  return ncclSuccess;
}

ncclResult_t CommState::Receive(int peer, uint32_t kind, void* data, size_t bytes) {
  if (peer < 0 || peer >= size_) {
    return Fail(ncclInvalidArgument, "a receive from rank " + std::to_string(peer));
  }
  Peer& p = *peers_[peer];
  Message m;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !p.inbox.empty() || p.closed || aborted() || revoked(); });
    if (aborted() || revoked()) return ncclInvalidUsage;
    if (p.inbox.empty()) return kLost;  // the peer closed its end: see Send
    m = std::move(p.inbox.front());
    p.inbox.pop_front();
  }
  if (peer != rank_) Acknowledge(peer);
  if (m.kind != kind || m.bytes.size() != bytes) {
    return Fail(ncclInternalError,
                "rank " + std::to_string(peer) + " sent a message of kind " +
                    std::to_string(m.kind) + ", " + std::to_string(m.bytes.size()) +
                    " bytes, where this rank's collective expected kind " + std::to_string(kind) +
                    ", " + std::to_string(bytes) + " bytes: the ranks' calls differ");
  }
  std::memcpy(data, m.bytes.data(), bytes);
  return ncclSuccess;
}

void CommState::Acknowledge(int peer) {
  Peer& p = *peers_[peer];
  std::lock_guard<std::mutex> lock(p.send_mu);
  const Header h{kMagic, kTaken, 0};
  WriteAll(p.fd, &h, sizeof(h));  // a peer that is gone no longer waits for it
}

ncclResult_t CommState::WaitForAcks() {
  std::unique_lock<std::mutex> lock(mu_);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    Peer& p = *peers_[peer];
    cv_.wait(lock, [&] { return p.taken >= p.sent || p.closed || aborted() || revoked(); });
    if (aborted() || revoked()) return ncclInvalidUsage;
    if (p.taken < p.sent) return kLost;  // the peer closed its end: see Send
  }
  return ncclSuccess;
}

void CommState::MarkAborted() {
  aborted_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

void CommState::WaitUntilAborted() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return aborted() || revoked(); });
}

void CommState::Queue() {
  std::lock_guard<std::mutex> lock(mu_);
  ++queued_;
}

void CommState::Ran() {
  std::lock_guard<std::mutex> lock(mu_);
  --queued_;
  cv_.notify_all();
}

bool CommState::WaitForQueued(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return queued_ == 0; });
}

void CommState::RevokeWithoutEnd() {
  std::lock_guard<std::mutex> lock(mu_);
  revoked_.store(true);
  async_error_.store(ncclInProgress);
  cv_.notify_all();
}

void CommState::Revoke() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    revoked_.store(true);
    async_error_.store(ncclInProgress);  // until its work has stopped (nccl.h)
    cv_.notify_all();
  }
  std::thread([self = shared_from_this()] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    self->async_error_.store(ncclSuccess);
  }).detach();
}

ncclResult_t CommState::ReceiveControl(int peer, uint32_t kind, void* data, size_t bytes,
                                       const CommState& stop) {
  Peer& p = *peers_.at(peer);
  int acks_owed = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    while (!p.inbox.empty() && p.inbox.front().kind != kind) {
      p.inbox.pop_front();  // what a revoked or idle collective left: taken, and dropped
      ++acks_owed;
    }
    if (!p.inbox.empty()) break;
    if (p.closed || aborted() || stop.aborted()) {
      return ncclRemoteError;
    }
    cv_.wait_for(lock, std::chrono::milliseconds(20));  // `stop` does not notify this one
  }
  Message m = std::move(p.inbox.front());
  p.inbox.pop_front();
  lock.unlock();
  for (int i = 0; i <= acks_owed; ++i) Acknowledge(peer);
  if (m.bytes.size() != bytes) return ncclInternalError;
  std::memcpy(data, m.bytes.data(), bytes);
  return ncclSuccess;
}

void CommState::Abort() {
  MarkAborted();
  if (readers_joined_.exchange(true)) return;
  // shutdown, not close: wakes a reader in recv and a sender in send; the numbers stay
  // taken until the destructor.
  for (auto& p : peers_) {
    if (p && p->fd >= 0) shutdown(p->fd, SHUT_RDWR);
  }
  for (auto& p : peers_) {
    if (p && p->reader.joinable()) p->reader.join();
  }
}

ncclResult_t StartConnecting(ncclComm* comm, const ncclConfig_t* config,
                             std::function<ncclResult_t()> connect) {
  std::shared_ptr<CommState> state = comm->state;
  state->set_nonblocking(config != nullptr && config->blocking == 0);
  auto run = [state, connect] {
    if (connect() == ncclSuccess) state->set_async_error(ncclSuccess);
  };
  if (config != nullptr && config->blocking == 0) {
    comm->connecting = std::thread(run);
    return ncclInProgress;
  }
  run();
  return state->async_error();
}

}  // namespace host_gpu
