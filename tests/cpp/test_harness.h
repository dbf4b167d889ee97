// A tiny test harness for the native runtime tests: no gtest, no dependencies.
//
//   TFRING_TEST(Negotiator, CompletesInOrder) {
//     EXPECT_EQ(responses.size(), 2u);
//     ASSERT_TRUE(status.ok()) << status.ToString();
//   }
//
// test_harness.cc holds main(): it runs every registered test (or those whose "Suite.Name"
// contains the argument of --filter=), prints one line per test, then exactly
// "N passed, N failed", and exits non-zero on any failure. A test that runs past
// --timeout_seconds= (default 60) aborts the process with its name: a hang is a failure.
//
// EXPECT_* records a failure with file:line and continues; ASSERT_* also returns from the
// enclosing function (the test body, or the lambda it sits in). Both may be used from any
// thread, so ranks-as-threads tests can check results on the rank that computed them.
// Each macro accepts `<< extra` context, as in the example.
//
// A process-wide Environment (TFRING_TEST_ENVIRONMENT) lets a binary set up around all
// tests, e.g. MPI: initialize, print only on rank 0, agree across ranks whether a test failed.
#pragma once

#include <sstream>
#include <string>

namespace tfring {
namespace testing {

// Hooks around the whole run. The default prints everything and judges each process alone.
class Environment {
 public:
  virtual ~Environment() = default;
  virtual void SetUp() {}
  virtual void TearDown() {}
  // Whether this process prints the per-test lines and the summary (failures always print).
  virtual bool verbose() const { return true; }
  // Called once per test by every process, in the same order; returns whether the test
  // failed in any process (an MPI environment combines the verdicts across ranks).
  virtual bool FailedAnywhere(bool failed_here) { return failed_here; }
  // Non-empty after SetUp: this machine cannot run these tests (no GPU, say). The harness
  // then prints "SKIPPED: <reason>" and "0 passed, 0 failed, N skipped", and exits 0.
  virtual std::string SkipReason() const { return ""; }
};

using TestFn = void (*)();

struct TestRegistrar {
  TestRegistrar(const char* suite, const char* name, TestFn fn);
};

struct EnvironmentRegistrar {
  explicit EnvironmentRegistrar(Environment* env);
};

// Records a failure of the running test and prints it at once, with its location.
void RecordFailure(const char* file, int line, const std::string& message);
// Failures recorded so far in the running test (any thread).
int CurrentFailures();
// Ends the process with the tests' result (saying `why`) if it is still running `seconds`
// from now: for a TearDown that may not return, such as the MPI_Finalize that Open MPI's
// fault tolerance can leave waiting after a rank was lost.
void EndWithinSeconds(double seconds, const std::string& why);

// Collects a failure message and records it when destroyed (so `<< extra` can follow).
class FailureBuilder {
 public:
  FailureBuilder(const char* file, int line, std::string what);
  ~FailureBuilder();
  template <typename T>
  FailureBuilder& operator<<(const T& v) {
    extra_ << v;
    return *this;
  }

 private:
  const char* file_;
  int line_;
  std::string what_;
  std::ostringstream extra_;
};

// Lets ASSERT_* `return;` after `<< extra` from a void function.
struct Voidify {
  void operator&(const FailureBuilder&) {}
};

template <typename A, typename B>
std::string DescribeComparison(const char* op, const char* a_text, const char* b_text,
                               const A& a, const B& b) {
  std::ostringstream os;
  os << "expected " << a_text << " " << op << " " << b_text << ", got " << a << " vs " << b;
  return os.str();
}

}  // namespace testing
}  // namespace tfring

#define TFRING_TEST(suite, name)                                                   \
  static void TfringTest_##suite##_##name();                                       \
  static ::tfring::testing::TestRegistrar tfring_test_registrar_##suite##_##name(  \
      #suite, #name, &TfringTest_##suite##_##name);                                \
  static void TfringTest_##suite##_##name()

#define TFRING_TEST_ENVIRONMENT(type) \
  static ::tfring::testing::EnvironmentRegistrar tfring_test_environment_(new type())

#define TFRING_TEST_FAIL_(what) ::tfring::testing::FailureBuilder(__FILE__, __LINE__, (what))

#define EXPECT_TRUE(cond) \
  if (cond) {             \
  } else                  \
    TFRING_TEST_FAIL_("expected " #cond)

#define EXPECT_FALSE(cond) EXPECT_TRUE(!(cond))

#define TFRING_TEST_CMP_(a, b, op)                                                          \
  if ((a)op(b)) {                                                                           \
  } else                                                                                    \
    TFRING_TEST_FAIL_(::tfring::testing::DescribeComparison(#op, #a, #b, (a), (b)))

#define EXPECT_EQ(a, b) TFRING_TEST_CMP_(a, b, ==)
#define EXPECT_NE(a, b) TFRING_TEST_CMP_(a, b, !=)
#define EXPECT_LT(a, b) TFRING_TEST_CMP_(a, b, <)
#define EXPECT_LE(a, b) TFRING_TEST_CMP_(a, b, <=)
#define EXPECT_GE(a, b) TFRING_TEST_CMP_(a, b, >=)

// `haystack` (a std::string) contains `needle`.
#define EXPECT_CONTAINS(haystack, needle)                                          \
  if (std::string(haystack).find(needle) != std::string::npos) {                   \
  } else                                                                           \
    TFRING_TEST_FAIL_(std::string("expected \"") + std::string(haystack) +         \
                      "\" to contain \"" + std::string(needle) + "\"")

#define ASSERT_TRUE(cond) \
  if (cond) {             \
  } else                  \
    return ::tfring::testing::Voidify() & TFRING_TEST_FAIL_("expected " #cond)

#define ASSERT_EQ(a, b)                                                         \
  if ((a) == (b)) {                                                             \
  } else                                                                        \
    return ::tfring::testing::Voidify() &                                       \
           TFRING_TEST_FAIL_(::tfring::testing::DescribeComparison("==", #a, #b, (a), (b)))
