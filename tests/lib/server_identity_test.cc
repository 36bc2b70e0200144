// Server identity (gym/server_identity.h): a process declares which server
// it is, once and before its first operation (a forked child may declare
// its own); the reader sees it as a gym_server_identity series.
#include "gym/server_identity.h"

#include <gtest/gtest.h>

#include <semaphore>
#include <stdexcept>

#include "gym/registry_reader.h"
#include "gym/resources_operation.h"
#include "gym/segment_writer.h"
#include "test_support.h"

namespace gym {
namespace {

using testing::find_series;
using testing::TempDir;
using Labels = std::vector<std::pair<std::string, std::string>>;

Labels outcome_labels(std::string op, std::string ex, std::string outcome) {
  return {{"nemo_gym_resources_executor", ex},
          {"nemo_gym_resources_operation", op},
          {"nemo_gym_resources_operation_outcome", outcome}};
}

TEST(ServerIdentity, InvalidNamesAreRejected) {
  TempDir tmp;
  // In a child: this process has run operations (declaring is then refused).
  testing::Ready ready;
  testing::Gate gate;
  pid_t pid = testing::spawn([&] {
    SegmentWriter writer(tmp.path());
    int bad = 0;
    for (auto [name, type] : {std::pair<std::string, std::string>{"", "agent"},
                              {std::string(129, 'x'), "agent"},
                              {"x", ""}}) {
      try {
        declare_server(name, type, writer);
      } catch (const std::invalid_argument&) {
        ++bad;
      }
    }
    declare_server("agent_1", "agent_server", writer);
    if (bad != 3 || !declared_server() || declared_server()->name != "agent_1") return 1;
    ready.signal();
    gate.wait();  // alive while the test reads its identity
    std::fflush(nullptr);
    ::_exit(0);
    return 0;
  });
  ready.wait(1);
  RegistryReader reader(tmp.path());
  const SeriesSample* id =
      find_series(reader.snapshot(), "gym_server_identity",
                  {{"nemo_gym_server_name", "agent_1"}, {"nemo_gym_server_type", "agent_server"}});
  ASSERT_NE(id, nullptr);
  EXPECT_EQ(id->gauge, 1);
  gate.open();
  EXPECT_EQ(testing::wait_exit(pid), 0);
}

// Child exit codes: 0 as expected, else the step that went wrong.
int declare_after_operations() {
  std::counting_semaphore<2> limit(2);
  { ResourcesOperation op(limit, Operation::kTool, Executor::kInline); }
  try {
    declare_server("late", "resources_server");
    return 1;  // accepted
  } catch (const std::logic_error& e) {
    if (std::string(e.what()).find("before the first operation") == std::string::npos) return 2;
  }
  if (declared_server().has_value()) return 3;  // changed something
  { ResourcesOperation op(limit, Operation::kTool, Executor::kInline); }
  return 0;
}

TEST(ServerIdentity, ADeclarationAfterTheFirstOperationIsRefusedAndChangesNothing) {
  TempDir tmp;
  pid_t pid = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    const int rc = declare_after_operations();
    std::fflush(nullptr);
    ::_exit(rc);
    return rc;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  const SeriesSample* d = find_series(snap, "gym_resources_operation_duration_seconds",
                                      outcome_labels("tool", "inline", "ok"));
  ASSERT_NE(d, nullptr) << "the series keep the labels they were registered with";
  EXPECT_EQ(d->count(), 2u) << "both operations in one series";
  EXPECT_EQ(snap.servers.size(), 0u) << "no identity was declared";
}

TEST(ServerIdentity, TheSameIdentityMayBeDeclaredAgainAfterOperationsButNoOtherExceptByAChild) {
  TempDir tmp;
  pid_t pid = testing::spawn([&] {
    ::setenv(SegmentWriter::kDirEnv, tmp.path().c_str(), 1);
    declare_server("math", "resources_server");
    std::counting_semaphore<2> limit(2);
    { ResourcesOperation op(limit, Operation::kVerify, Executor::kThread); }
    declare_server("math", "resources_server");  // the same: accepted
    int rc = 0;
    try {
      declare_server("code", "resources_server");
      rc = 1;
    } catch (const std::logic_error& e) {
      if (std::string(e.what()).find("as server 'math'") == std::string::npos) rc = 2;
    }
    // A forked child's operations register their series afresh: it may
    // declare a server of its own, and they carry it.
    if (rc == 0) {
      pid_t child = testing::spawn([&] {
        try {
          declare_server("verifier", "resources_server");
        } catch (const std::logic_error&) {
          ::_exit(1);
        }
        { ResourcesOperation op(limit, Operation::kVerify, Executor::kThread); }
        std::fflush(nullptr);
        ::_exit(0);
        return 0;
      });
      if (testing::wait_exit(child) != 0) rc = 3;
    }
    if (rc == 0 && declared_server()->name != "math") rc = 4;
    std::fflush(nullptr);
    ::_exit(rc);
    return rc;
  });
  ASSERT_EQ(testing::wait_exit(pid), 0);
  RegistryReader reader(tmp.path());
  const Snapshot& snap = reader.snapshot();
  auto count = [&](const char* server) {
    Labels l = outcome_labels("verify", "thread", "ok");
    l.emplace_back("nemo_gym_server_name", server);
    const SeriesSample* d = find_series(snap, "gym_resources_operation_duration_seconds", l);
    return d == nullptr ? 0u : d->count();
  };
  EXPECT_EQ(count("math"), 1u) << "the parent's operation";
  EXPECT_EQ(count("verifier"), 1u) << "the child's, under the child's identity";
}

}  // namespace
}  // namespace gym
