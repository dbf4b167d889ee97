// A damaged control-plane message, end to end, with ranks as threads (inproc_job.h), at
// sizes 2 and 3: one rank's request list on its way to rank 0, or rank 0's response list,
// arrives truncated, with another wire version, with bytes after its end, or with a count
// that promises more than it holds. The decoder's error (core/message.cc: "malformed ...
// message from rank N") must fail the pending op on every rank, naming the rank whose
// message was damaged, within seconds; nothing may crash or hang, and the job stops (a
// later op fails at once). The decoding itself is unit-tested in test_message.cc.
//
// A damaged request list is found by rank 0 alone, before its broadcast: it sends an abort in
// the decoder's words (negotiation_round.cc), so every rank fails with kAborted. A damaged
// response list is damaged at its sender, so every rank decodes the same bytes and fails
// with the decoder's kInternal. Not covered: a response list damaged on its way to one rank
// only; that rank stops, and its peers, which decoded theirs, wait for it in the data
// collective until the peer timeout.
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/cpp/collective_util.h"
#include "tests/cpp/inproc_job.h"
#include "tests/cpp/test_harness.h"

namespace tfring {
namespace testing {
namespace {

constexpr int kSizes[] = {2, 3};
// Every wait in the job's worlds gives up after this: if the library leaves a rank waiting
// for a peer that has stopped, the ops fail (with the world's "broken" error, which names
// no malformed message) instead of hanging the test.
constexpr double kWorldTimeoutSeconds = 4.0;
// How long a test waits for each op; far more than a healthy job needs (milliseconds).
constexpr double kOpWaitSeconds = 3.0;

enum class Damage { kTruncated, kWrongVersion, kTrailingBytes, kHugeCount };
constexpr Damage kAllDamage[] = {Damage::kTruncated, Damage::kWrongVersion,
                                 Damage::kTrailingBytes, Damage::kHugeCount};

const char* DamageName(Damage d) {
  switch (d) {
    case Damage::kTruncated: return "truncated";
    case Damage::kWrongVersion: return "wrong version";
    case Damage::kTrailingBytes: return "trailing bytes";
    case Damage::kHugeCount: return "huge count";
  }
  return "?";
}

// The words of message.cc's error for each damage: what the test expects after the rank.
const char* DamageWords(Damage d) {
  switch (d) {
    case Damage::kTruncated: return "";  // "empty", "no request count", "truncated ...": any
    case Damage::kWrongVersion: return "wire format version 251";
    case Damage::kTrailingBytes: return "bytes after the last";
    case Damage::kHugeCount: return "";  // read as a truncated message or field
  }
  return "";
}

// Where a message's count of requests or responses sits: a request list is the version
// byte, then the count; a response list is the version byte, the abort message (a
// uint32 length and its bytes), a flag byte, an int64 and a double, then the count.
size_t CountOffset(const std::string& bytes, bool responses) {
  if (!responses) return 1;
  uint32_t abort_length = 0;
  std::memcpy(&abort_length, bytes.data() + 1, sizeof(abort_length));
  return 1 + 4 + abort_length + 1 + 8 + 8;
}

std::string Damaged(Damage d, std::string bytes, bool responses) {
  switch (d) {
    case Damage::kTruncated:
      bytes.resize(bytes.size() / 2);
      break;
    case Damage::kWrongVersion:
      bytes[0] = static_cast<char>(static_cast<uint8_t>(bytes[0]) ^ 0xFF);  // 4 -> 251
      break;
    case Damage::kTrailingBytes:
      bytes += "garbage";
      break;
    case Damage::kHugeCount: {
      const uint32_t huge = 0xFFFFFFFFu;
      std::memcpy(&bytes[CountOffset(bytes, responses)], &huge, sizeof(huge));
      break;
    }
  }
  return bytes;
}

// Which message is damaged: rank `victim`'s first request list (before it is gathered to
// rank 0), or rank 0's first response list (before it is broadcast, so that every rank,
// rank 0 included, receives the same damaged bytes).
struct Injection {
  bool responses = false;
  int victim = 0;  // the rank whose message is damaged (0 for responses)
  Damage damage = Damage::kTruncated;
  std::atomic<int> injected{0};  // how many messages were damaged: 1 once it has happened
};

// Passes everything to the in-process control plane, but damages the one message of
// `injection` on its way out of its sender.
class DamagingControlPlane : public ControlPlane {
 public:
  DamagingControlPlane(std::unique_ptr<ControlPlane> inner, Injection* injection)
      : inner_(std::move(inner)), injection_(injection) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void SetActive(bool active) override { inner_->SetActive(active); }
  Status AllreduceAnd(std::vector<uint64_t>* words) override {
    return inner_->AllreduceAnd(words);
  }
  Status GatherToRoot(const std::string& mine, std::vector<std::string>* all) override {
    if (!injection_->responses && rank() == injection_->victim && !done_) {
      done_ = true;
      ++injection_->injected;
      return inner_->GatherToRoot(Damaged(injection_->damage, mine, false), all);
    }
    return inner_->GatherToRoot(mine, all);
  }
  Status BroadcastFromRoot(std::string* bytes) override {
    if (injection_->responses && rank() == 0 && !done_) {
      done_ = true;
      ++injection_->injected;
      *bytes = Damaged(injection_->damage, *bytes, true);
    }
    return inner_->BroadcastFromRoot(bytes);
  }

 private:
  std::unique_ptr<ControlPlane> inner_;
  Injection* injection_;
  bool done_ = false;  // only this rank's cycle thread calls the control plane
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs one job of `size` ranks with `injection`'s damage: every rank submits an allreduce,
// which must fail on every rank with the decoder's words for the victim's message.
void ExpectEveryRankFails(int size, Injection* injection) {
  const std::string what = injection->responses ? "response" : "request";
  const std::string context = std::string(DamageName(injection->damage)) + " " + what +
                              " list of rank " + std::to_string(injection->victim) +
                              ", size " + std::to_string(size);
  const std::string named = "malformed " + what + " message from rank " +
                            std::to_string(injection->victim) + " on the control plane";
  // A damaged request list is found by rank 0 alone, which stops every rank with an abort
  // in its words; a damaged response list by every rank, each failing with its own error.
  const StatusCode code = injection->responses ? StatusCode::kInternal : StatusCode::kAborted;
  const auto start = std::chrono::steady_clock::now();
  {
    InprocJob::Wrappers wrap;
    wrap.control_plane = [injection](std::unique_ptr<ControlPlane> inner, int) {
      return std::unique_ptr<ControlPlane>(new DamagingControlPlane(std::move(inner), injection));
    };
    InprocJob job(size, TestOptions(), wrap, kWorldTimeoutSeconds);
    job.OnEveryRank([&](int rank) {
      OpPtr op = SubmitAllreduce(job.rank(rank), "grad/w", DataType::kFloat32, {4},
                                 TestValues(DataType::kFloat32, rank, 4), ReduceOp::kSum);
      const Status s = WaitFor(op, kOpWaitSeconds);
      EXPECT_FALSE(s.ok()) << context << ": rank " << rank << "'s op succeeded";
      EXPECT_TRUE(s.code() != StatusCode::kDeadlineExceeded)
          << context << ": rank " << rank << "'s op hung: " << s.message();
      EXPECT_CONTAINS(s.message(), named) << context << ", rank " << rank;
      EXPECT_CONTAINS(s.message(), DamageWords(injection->damage)) << context << ", rank " << rank;
      EXPECT_TRUE(s.code() == code) << context << ", rank " << rank << ": " << s.ToString();
      EXPECT_CONTAINS(s.message(), " (tensor 'grad/w', rank " + std::to_string(rank) + ")")
          << context;
    });
    EXPECT_EQ(injection->injected.load(), 1) << context << ": the damage was never injected";
    // The job has stopped on every rank: a later op fails at once, for the same reason.
    for (int r = 0; r < size; ++r) {
      OpPtr late = SubmitAllreduce(job.rank(r), "late", DataType::kFloat32, {1}, {1.0},
                                   ReduceOp::kSum);
      const Status s = WaitFor(late, kOpWaitSeconds);
      EXPECT_FALSE(s.ok()) << context << ": rank " << r << "'s later op succeeded";
      EXPECT_CONTAINS(s.message(), named) << context << ", rank " << r << "'s later op";
    }
  }  // ~InprocJob: Shutdown must not wait for a peer either
  EXPECT_LT(SecondsSince(start), 2.0) << context << ": the failure took too long";
}

TFRING_TEST(MalformedMessageInproc, DamagedRequestsFailEveryRankNamingTheSender) {
  for (int size : kSizes) {
    for (int victim = 0; victim < size; ++victim) {
      for (Damage damage : kAllDamage) {
        Injection injection;
        injection.victim = victim;
        injection.damage = damage;
        ExpectEveryRankFails(size, &injection);
      }
    }
  }
}

TFRING_TEST(MalformedMessageInproc, DamagedResponsesFailEveryRankNamingRankZero) {
  for (int size : kSizes) {
    for (Damage damage : kAllDamage) {
      Injection injection;
      injection.responses = true;
      injection.victim = 0;
      injection.damage = damage;
      ExpectEveryRankFails(size, &injection);
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace tfring
