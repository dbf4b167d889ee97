#include "tests/cpp/test_harness.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace tfring {
namespace testing {
namespace {

struct Test {
  std::string name;  // "Suite.Name"
  TestFn fn;
};

std::vector<Test>& Registry() {
  static std::vector<Test>* tests = new std::vector<Test>();
  return *tests;
}

Environment*& TheEnvironment() {
  static Environment* env = nullptr;
  return env;
}

std::mutex g_mutex;  // serializes failure output and counting across rank threads
std::atomic<int> g_failures{0};
std::string g_current;

// Aborts the process when the running test passes its deadline (0: no test running).
std::atomic<int64_t> g_deadline_ms{0};
// The exit status once every test has run (-1 before).
std::atomic<int> g_result{-1};

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Watchdog() {
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const int64_t deadline = g_deadline_ms.load();
    if (deadline != 0 && NowMs() > deadline) {
      std::lock_guard<std::mutex> lock(g_mutex);
      std::fprintf(stderr, "[  TIMEOUT ] %s ran past its time limit; aborting the run\n",
                   g_current.c_str());
      std::fflush(stderr);
      std::_Exit(2);
    }
  }
}

}  // namespace

TestRegistrar::TestRegistrar(const char* suite, const char* name, TestFn fn) {
  Registry().push_back({std::string(suite) + "." + name, fn});
}

EnvironmentRegistrar::EnvironmentRegistrar(Environment* env) { TheEnvironment() = env; }

void RecordFailure(const char* file, int line, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_failures;
  std::fprintf(stderr, "%s:%d: Failure in %s\n  %s\n", file, line, g_current.c_str(),
               message.c_str());
  std::fflush(stderr);
}

int CurrentFailures() { return g_failures.load(); }

void EndWithinSeconds(double seconds, const std::string& why) {
  std::thread([seconds, why] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    std::fprintf(stderr, "%s: ending the process with the tests' result\n", why.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    const int result = g_result.load();
    std::_Exit(result >= 0 ? result : 2);
  }).detach();
}

FailureBuilder::FailureBuilder(const char* file, int line, std::string what)
    : file_(file), line_(line), what_(std::move(what)) {}

FailureBuilder::~FailureBuilder() {
  const std::string extra = extra_.str();
  RecordFailure(file_, line_, extra.empty() ? what_ : what_ + " (" + extra + ")");
}

int RunAllTests(int argc, char** argv) {
  std::string filter;
  double timeout_seconds = 60;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--filter=", 9) == 0) filter = argv[i] + 9;
    if (std::strncmp(argv[i], "--timeout_seconds=", 18) == 0) {
      timeout_seconds = std::atof(argv[i] + 18);
    }
  }
  Environment default_env;
  Environment* env = TheEnvironment() ? TheEnvironment() : &default_env;
  env->SetUp();
  const std::string skip = env->SkipReason();
  if (!skip.empty()) {
    int count = 0;
    for (const Test& t : Registry()) count += filter.empty() || t.name.find(filter) != std::string::npos;
    if (env->verbose()) std::printf("SKIPPED: %s\n0 passed, 0 failed, %d skipped\n", skip.c_str(), count);
    std::fflush(stdout);
    env->TearDown();
    return 0;
  }
  std::thread(Watchdog).detach();
  int passed = 0, failed = 0;
  for (const Test& t : Registry()) {
    if (!filter.empty() && t.name.find(filter) == std::string::npos) continue;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      g_current = t.name;
      g_failures = 0;
    }
    if (env->verbose()) std::printf("[ RUN      ] %s\n", t.name.c_str());
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    g_deadline_ms = NowMs() + static_cast<int64_t>(timeout_seconds * 1000);
    t.fn();
    g_deadline_ms = 0;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count();
    const bool failed_here = g_failures.load() > 0;
    const bool failed_anywhere = env->FailedAnywhere(failed_here);
    (failed_anywhere ? failed : passed)++;
    if (env->verbose() || failed_here) {
      std::printf("[ %s ] %s (%.0f ms)%s\n", failed_anywhere ? " FAILED " : "      OK",
                  t.name.c_str(), ms, failed_anywhere && !failed_here ? " (on another rank)" : "");
      std::fflush(stdout);
    }
  }
  if (env->verbose()) std::printf("%d passed, %d failed\n", passed, failed);
  std::fflush(stdout);
  g_result = failed == 0 ? 0 : 1;
  env->TearDown();
  return failed == 0 ? 0 : 1;
}

}  // namespace testing
}  // namespace tfring

int main(int argc, char** argv) { return tfring::testing::RunAllTests(argc, argv); }
