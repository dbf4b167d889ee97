// The control-plane wire format (core/message.h): what is encoded is what is decoded, and a
// damaged message is an error, not a crash.
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/core/message.h"

namespace tfring {
namespace {

constexpr int kWorld = 8;  // the job the sample messages come from

TensorKey InSet(TensorKey key, std::vector<int32_t> set) {
  key.set = std::move(set);
  return key;
}

std::vector<Request> SampleRequests() {
  Request a;
  a.key.name = "grad/dense_1/kernel:0";
  a.kind = CollectiveKind::kAllreduce;
  a.dtype = DataType::kBFloat16;
  a.reduce_op = ReduceOp::kProduct;
  a.prescale_factor = 0.125;
  a.postscale_factor = 3.5;
  a.shape = {17, 3};
  Request b;
  b.key.name = std::string("with\0nul and \xc3\xa9", 15);
  b.kind = CollectiveKind::kBroadcast;
  b.dtype = DataType::kBool;
  b.root_rank = 2;
  b.shape = {};  // a scalar
  b.cacheable = false;
  b.key.call_site = "train.py:42";
  Request c;
  c.key.unnamed = 12;  // an unnamed grouped call's second tensor
  c.key.part = 1;
  c.kind = CollectiveKind::kAllgather;
  c.shape = {0, 1LL << 40};
  c.key.set = {0, 2, 5};
  Request d;  // a grouped allreduce's unit: tensors of two dtypes, packed as bytes
  d.key.name = "grads";
  d.dtype = DataType::kUInt8;
  d.shape = {192};
  d.parts = {{DataType::kFloat32, {3, 4}}, {DataType::kInt64, {}}, {DataType::kFloat16, {0}}};
  std::vector<Request> all = {a, b, c, d};
  for (Request& q : all) q.name = KeyString(q.key);
  return all;
}

TFRING_TEST(Message, RequestsRoundTrip) {
  const auto in = SampleRequests();
  std::vector<Request> out;
  ASSERT_TRUE(DecodeRequests(EncodeRequests(in), 1, kWorld, &out).ok());
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_TRUE(out[i].SameSignature(in[i])) << "request " << i;
    EXPECT_TRUE(out[i].key == in[i].key) << "request " << i;
    EXPECT_EQ(out[i].key.call_site, in[i].key.call_site);
  }
  ASSERT_TRUE(DecodeRequests(EncodeRequests({}), 1, kWorld, &out).ok());
  EXPECT_TRUE(out.empty());
}

TFRING_TEST(Message, ResponseListRoundTrip) {
  ResponseList in;
  in.abort_message = "stalled: 'x'";
  Response a;
  a.key = PartKey(NamedKey("ag"), 2);
  a.kind = CollectiveKind::kAllgather;
  a.dtype = DataType::kInt64;
  a.first_dims = {3, 0, 5};
  Response b;
  b.key.name = "b";
  b.kind = CollectiveKind::kBroadcast;
  b.reduce_op = ReduceOp::kMin;
  b.root_rank = 1;
  b.cacheable = true;
  b.error = "Mismatched shapes for tensor 'b': rank 0 sent [2], rank 1 sent [3]";
  a.shared_call_site = "train.py:42";
  a.shape = {3, 4};
  a.key.set = {1, 3};
  a.joined = {3};
  in.responses = {a, b};
  for (Response& r : in.responses) r.name = KeyString(r.key);
  ResponseList out;
  ASSERT_TRUE(DecodeResponseList(EncodeResponseList(in), kWorld, &out).ok());
  EXPECT_EQ(out.abort_message, in.abort_message);
  ASSERT_EQ(out.responses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const Response& x = in.responses[i];
    const Response& y = out.responses[i];
    EXPECT_TRUE(static_cast<const Signature&>(x) == y) << "response " << i;
    EXPECT_TRUE(x.key == y.key) << "response " << i;
    EXPECT_TRUE(x.first_dims == y.first_dims && x.all_splits == y.all_splits &&
                x.joined == y.joined && x.error == y.error && x.shared_call_site == y.shared_call_site)
        << "response " << i;
  }
}

TFRING_TEST(Message, UnitsCompareTheirPartsAndNameThem) {
  const Request unit = SampleRequests()[3];
  EXPECT_TRUE(MixedParts(unit));
  Request same_dtype = unit;
  for (TensorPart& part : same_dtype.parts) part.dtype = DataType::kFloat32;
  EXPECT_FALSE(MixedParts(same_dtype));
  EXPECT_FALSE(MixedParts(SampleRequests()[0]));  // not a unit
  // A part's shape or dtype, or one part more, is another collective.
  Request other = unit;
  other.parts[1].shape = {1};
  EXPECT_FALSE(other.SameButName(unit));
  other = unit;
  other.parts[2].dtype = DataType::kBFloat16;
  EXPECT_FALSE(other.SameButName(unit));
  other = unit;
  other.parts.push_back({DataType::kFloat32, {1}});
  EXPECT_FALSE(other.SameButName(unit));
  EXPECT_EQ(KeyString(PartKey(unit.key, 2)), "grads.2");
  EXPECT_EQ(KeyString(InSet(PartKey(unit.key, 1), {0, 2})), "grads.1 [process set 0, 2]");
}

TFRING_TEST(Message, DamagedMessagesAreErrors) {
  const std::string requests = EncodeRequests(SampleRequests());
  std::vector<Request> out;
  for (size_t cut = 0; cut < requests.size(); ++cut) {
    const Status s = DecodeRequests(requests.substr(0, cut), 2, kWorld, &out);
    EXPECT_FALSE(s.ok()) << "truncated to " << cut << " bytes";
  }
  const Status extra = DecodeRequests(requests + "x", 3, kWorld, &out);
  EXPECT_TRUE(extra.code() == StatusCode::kInternal);
  EXPECT_CONTAINS(extra.message(), "malformed request message from rank 3");
  ResponseList list;
  EXPECT_FALSE(DecodeResponseList("\x05", kWorld, &list).ok());
}

// Bytes of `message` with byte `at` set to `value`.
std::string With(std::string message, size_t at, char value) {
  message[at] = value;
  return message;
}

TFRING_TEST(Message, VersionEnumsAndCountsAreChecked) {
  const std::string requests = EncodeRequests(SampleRequests());
  std::vector<Request> out;
  const Status old = DecodeRequests(With(requests, 0, 7), 4, kWorld, &out);
  EXPECT_CONTAINS(old.message(), "from rank 4");
  EXPECT_CONTAINS(old.message(), "wire format version 7, this rank speaks 4");
  // The first request's kind byte: after the version (1), the count (4), the key: its name's
  // length (4), the name, the unnamed call's number (8) and the part (4).
  const size_t kind_at = 1 + 4 + 4 + SampleRequests()[0].key.name.size() + 8 + 4;
  EXPECT_CONTAINS(DecodeRequests(With(requests, kind_at, 42), 0, kWorld, &out).message(),
                  "request 0: unknown collective 42");
  EXPECT_CONTAINS(DecodeRequests(With(requests, kind_at + 1, 99), 0, kWorld, &out).message(),
                  "unknown dtype 99");
  EXPECT_CONTAINS(DecodeRequests(With(requests, kind_at + 2, 2), 0, kWorld, &out).message(),
                  "unknown reduce op 2");  // 2 is Horovod's Adasum: never on the wire
  EXPECT_FALSE(DecodeRequests(With(requests, kind_at + 3, 5), 0, kWorld, &out).ok());  // a bool of 5
  // A request count of four billion: an error at once, nothing allocated for it.
  std::string huge = requests;
  for (size_t i = 1; i < 5; ++i) huge[i] = '\xff';
  EXPECT_FALSE(DecodeRequests(huge, 0, kWorld, &out).ok());
}

TFRING_TEST(Message, RanksOutsideTheJobAreErrors) {
  // Later code indexes per-rank arrays by these: a rank the job lacks must be an error here.
  std::vector<Request> out;
  Request q;
  q.key.name = "w";
  q.kind = CollectiveKind::kBroadcast;
  q.root_rank = kWorld;
  EXPECT_CONTAINS(DecodeRequests(EncodeRequests({q}), 1, kWorld, &out).message(),
                  "root rank 8 of 'w' outside a job of size 8");
  q.root_rank = -1;
  EXPECT_FALSE(DecodeRequests(EncodeRequests({q}), 1, kWorld, &out).ok());
  q.root_rank = 0;
  for (const std::vector<int32_t>& set : std::vector<std::vector<int32_t>>{
           {0, kWorld}, {-1, 2}, {3, 1}, {2, 2}}) {
    q.key.set = set;
    EXPECT_CONTAINS(DecodeRequests(EncodeRequests({q}), 1, kWorld, &out).message(),
                    "process set " + RankListString(set) + " are not ascending ranks");
  }
  q.key.set = {0, 7};
  EXPECT_TRUE(DecodeRequests(EncodeRequests({q}), 1, kWorld, &out).ok());
  ResponseList list;
  Response r;
  r.key.name = "w";
  r.joined = {9};
  list.responses = {r};
  EXPECT_CONTAINS(DecodeResponseList(EncodeResponseList(list), kWorld, &list).message(),
                  "joined ranks [9] are not ascending ranks of a job of size 8");
}

TFRING_TEST(Message, FuzzedMessagesAreErrorsNeverCrashes) {
  // Deterministic: a fixed linear congruential generator, so a failure reproduces.
  uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(state >> 33);
  };
  ResponseList in;
  Response a;
  a.key.name = "grad/w";
  a.first_dims = {1, 2, 3};
  a.joined = {2};
  a.shape = {4, 5};
  in.responses = {a, a};
  const std::string responses = EncodeResponseList(in);
  const std::string requests = EncodeRequests(SampleRequests());
  int rejected = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const std::string& base = trial % 2 ? responses : requests;
    std::string damaged = base;
    const int flips = 1 + next() % 4;
    for (int f = 0; f < flips; ++f) damaged[next() % damaged.size()] = static_cast<char>(next());
    if (next() % 4 == 0) damaged.resize(next() % damaged.size());
    std::vector<Request> reqs;
    ResponseList list;
    const Status s = trial % 2 ? DecodeResponseList(damaged, kWorld, &list)
                               : DecodeRequests(damaged, 1, kWorld, &reqs);
    if (!s.ok()) {
      ++rejected;
      EXPECT_TRUE(s.code() == StatusCode::kInternal) << s.ToString();
      EXPECT_CONTAINS(s.message(), "malformed");
    }
  }
  // Most damage is caught (a flip inside a name or a value can still decode).
  EXPECT_GE(rejected, 10000);
}

TFRING_TEST(Message, SameSignatureComparesEveryField) {
  const Request a = SampleRequests()[0];
  Request b = a;
  EXPECT_TRUE(a.SameSignature(b));
  b.shape = {17, 4};
  EXPECT_FALSE(a.SameSignature(b));
  b = a;
  b.postscale_factor = 1;
  EXPECT_FALSE(a.SameSignature(b));
  b = a;
  b.cacheable = false;
  EXPECT_FALSE(a.SameSignature(b));
  b = a;
  b.key.set = {0, 1};
  EXPECT_FALSE(a.SameSignature(b));
}

TFRING_TEST(Message, AResponseCarriesItsRequestsSignature) {
  for (const Request& q : SampleRequests()) {
    const Response r = ResponseTo(q);
    EXPECT_FALSE(r.cacheable) << "the negotiator, not the request, decides that";
    Request back = SignatureOf(r);
    back.cacheable = q.cacheable;
    EXPECT_TRUE(back.SameSignature(q)) << "'" << q.name << "'";
    EXPECT_EQ(back.key.call_site, std::string()) << "the call site is not part of the signature";
  }
}

TFRING_TEST(Message, OnlyLoneUnnamedEagerCallsAreCachedByCallSite) {
  Request q;
  q.key.unnamed = 12;
  q.key.call_site = "train.py:42";
  EXPECT_TRUE(CachedByCallSite(q));
  q.key.set = {0, 2};
  EXPECT_TRUE(CachedByCallSite(q)) << "in a process set too";
  q.key.part = 1;
  EXPECT_FALSE(CachedByCallSite(q)) << "a grouped call's tensors share their call site";
  q.key = NamedKey("unnamed.12");
  EXPECT_FALSE(CachedByCallSite(q)) << "a user's own name that looks like one";
  q.key.unnamed = 12;
  q.key.call_site = "";
  EXPECT_FALSE(CachedByCallSite(q)) << "no call site to cache it under";
  EXPECT_EQ(UnnamedCacheKey("train.py:42", {}), std::string("unnamed@train.py:42"));
  EXPECT_EQ(UnnamedCacheKey("train.py:42", {1, 2}),
            std::string("unnamed@train.py:42 [process set 1, 2]"));
}

TFRING_TEST(Message, KeyStringsTellKeysApart) {
  const TensorKey w = NamedKey("w");
  EXPECT_EQ(KeyString(w), std::string("w"));
  EXPECT_EQ(KeyString(InSet(w, {0, 2})), std::string("w [process set 0, 2]"));
  EXPECT_NE(KeyString(InSet(w, {0, 2})), KeyString(InSet(w, {1, 2})));
  EXPECT_FALSE(InSet(w, {0, 2}).SameOp(w)) << "the set is part of the key";
  TensorKey unnamed;
  unnamed.unnamed = 7;
  EXPECT_EQ(KeyString(unnamed), std::string("unnamed.7"));
  EXPECT_EQ(KeyString(InSet(PartKey(unnamed, 0), {1, 2})),
            std::string("unnamed.7.0 [process set 1, 2]"));
  TensorKey elsewhere = unnamed;
  elsewhere.call_site = "train.py:9";
  EXPECT_TRUE(elsewhere == unnamed) << "the call site does not tell calls apart";
  EXPECT_EQ(KeyString(elsewhere), KeyString(unnamed));
  // A name that ends in digits is the op's own: not a grouped op's part.
  const TensorKey dotted = NamedKey("layer.1");
  EXPECT_EQ(dotted.part, -1);
  EXPECT_FALSE(dotted.SameOp(NamedKey("layer")));
  EXPECT_TRUE(PartKey(w, 3).SameOp(w));
  EXPECT_TRUE(SetMembers({}, 3) == std::vector<int32_t>({0, 1, 2}));
  Response r;
  r.joined = {1};
  EXPECT_EQ(Contributors(r, 3), 2);
}

}  // namespace
}  // namespace tfring
