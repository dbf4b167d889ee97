// The control-plane wire format (core/message.h): what is encoded is what is decoded, and a
// damaged message is an error, not a crash.
#include "tests/cpp/test_harness.h"
#include "tfring/kernels/core/message.h"

namespace tfring {
namespace {

std::vector<Request> SampleRequests() {
  Request a;
  a.name = "grad/dense_1/kernel:0";
  a.kind = CollectiveKind::kAllreduce;
  a.dtype = DataType::kBFloat16;
  a.reduce_op = ReduceOp::kProduct;
  a.prescale_factor = 0.125;
  a.postscale_factor = 3.5;
  a.shape = {17, 3};
  Request b;
  b.name = std::string("with\0nul and \xc3\xa9", 15);
  b.kind = CollectiveKind::kBroadcast;
  b.dtype = DataType::kBool;
  b.root_rank = 2;
  b.shape = {};  // a scalar
  b.cacheable = false;
  b.call_site = "train.py:42";
  Request c;
  c.name = "";
  c.kind = CollectiveKind::kAllgather;
  c.shape = {0, 1LL << 40};
  c.process_set = {0, 2, 5};
  return {a, b, c};
}

TFRING_TEST(Message, RequestsRoundTrip) {
  const auto in = SampleRequests();
  std::vector<Request> out;
  ASSERT_TRUE(DecodeRequests(EncodeRequests(in), &out).ok());
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_TRUE(out[i].SameSignature(in[i])) << "request " << i;
    EXPECT_EQ(out[i].call_site, in[i].call_site);
  }
  ASSERT_TRUE(DecodeRequests(EncodeRequests({}), &out).ok());
  EXPECT_TRUE(out.empty());
}

TFRING_TEST(Message, ResponseListRoundTrip) {
  ResponseList in;
  in.abort_message = "stalled: 'x'";
  Response a;
  a.name = "ag";
  a.kind = CollectiveKind::kAllgather;
  a.dtype = DataType::kInt64;
  a.first_dims = {3, 0, 5};
  Response b;
  b.name = "b";
  b.kind = CollectiveKind::kBroadcast;
  b.reduce_op = ReduceOp::kMin;
  b.root_rank = 1;
  b.cacheable = true;
  b.error = "Mismatched shapes for tensor 'b': rank 0 sent [2], rank 1 sent [3]";
  a.shape = {3, 4};
  a.process_set = {1, 3};
  a.joined = {3};
  in.responses = {a, b};
  ResponseList out;
  ASSERT_TRUE(DecodeResponseList(EncodeResponseList(in), &out).ok());
  EXPECT_EQ(out.abort_message, in.abort_message);
  ASSERT_EQ(out.responses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const Response& x = in.responses[i];
    const Response& y = out.responses[i];
    EXPECT_TRUE(x.name == y.name && x.kind == y.kind && x.dtype == y.dtype &&
                x.reduce_op == y.reduce_op && x.root_rank == y.root_rank &&
                x.first_dims == y.first_dims && x.cacheable == y.cacheable && x.error == y.error &&
                x.shape == y.shape && x.process_set == y.process_set && x.joined == y.joined)
        << "response " << i;
  }
}

TFRING_TEST(Message, DamagedMessagesAreErrors) {
  const std::string requests = EncodeRequests(SampleRequests());
  std::vector<Request> out;
  for (size_t cut = 0; cut < requests.size(); ++cut) {
    const Status s = DecodeRequests(requests.substr(0, cut), &out);
    EXPECT_FALSE(s.ok()) << "truncated to " << cut << " bytes";
  }
  const Status extra = DecodeRequests(requests + "x", &out);
  EXPECT_TRUE(extra.code() == StatusCode::kInternal);
  EXPECT_CONTAINS(extra.message(), "corrupt request message");
  ResponseList list;
  EXPECT_FALSE(DecodeResponseList("\x05", &list).ok());
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
  b.process_set = {0, 1};
  EXPECT_FALSE(a.SameSignature(b));
}

TFRING_TEST(Message, TensorKeysTellProcessSetsApart) {
  EXPECT_EQ(TensorKey("w", {}), std::string("w"));
  EXPECT_EQ(TensorKey("w", {0, 2}), std::string("w [process set 0, 2]"));
  EXPECT_NE(TensorKey("w", {0, 2}), TensorKey("w", {1, 2}));
  EXPECT_TRUE(SetMembers({}, 3) == std::vector<int32_t>({0, 1, 2}));
  Response r;
  r.joined = {1};
  EXPECT_EQ(Contributors(r, 3), 2);
}

}  // namespace
}  // namespace tfring
