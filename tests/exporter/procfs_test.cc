// procfs parsers and the process table against a fixture tree (tests/exporter/fixtures/proc;
//   1 systemd
//   100 "gym server"  (root; cmdline "python3 -m gym.server --name math")
//   ├── 101 "we(ird) )name"  ── 102 verifier
//   ├── 103 kworker (kernel thread), 104 (zombie)
//   ├── 105 worker  (its smaps_rollup cannot be read)
//   └── 200 claims parent 100 but started earlier: a reused pid, not a child
//   300 other
// (the memory collector on the same tree: memory_collector_fixture_test.cc)
#include <gtest/gtest.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "host/procfs.h"
#include "test_support.h"

namespace gym::exporter {
namespace {

const std::string kFixture = std::string(GYM_TEST_FIXTURES) + "/proc";

TEST(Procfs, StatCommMayHoldSpacesAndParentheses) {
  auto st = procfs::parse_stat(
      "101 (we(ird) )name) S 100 101 101 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 600 1000000 300 "
      "18446744073709551615 0 0");
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->pid, 101);
  EXPECT_EQ(st->comm, "we(ird) )name");
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(st->ppid, 100);
  EXPECT_EQ(st->start_ticks, 600u);
  EXPECT_EQ(st->rss_pages, 300u);
  EXPECT_FALSE(st->kernel_thread());
  EXPECT_FALSE(procfs::parse_stat("101 (x) S 1 2").has_value()) << "too few fields";
  EXPECT_FALSE(procfs::parse_stat("garbage").has_value());
  // Found by fuzzing: a pid beyond pid_t used to wrap to a negative number.
  EXPECT_FALSE(procfs::parse_stat("1000000000000000002 (x) S 1 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
                                  "600 1000 30 0")
                   .has_value());
  EXPECT_FALSE(procfs::parse_stat("5 (x) S 99999999999 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 600 "
                                  "1000 30 0")
                   .has_value());
  EXPECT_FALSE(procfs::parse_stat("").has_value());
}

TEST(Procfs, BootIdIsTheProcRootsTextOrNothing) {
  gym::testing::TempDir tmp;
  const std::string dir = tmp.path() + "/sys/kernel/random";
  std::filesystem::create_directories(dir);
  EXPECT_EQ(procfs::read_boot_id(tmp.path() + "/none"), "") << "unreadable";
  std::ofstream(dir + "/boot_id") << "0f8e3c47-5b7a-4f63-9d2e-1c0a6b2d7e11\n";
  EXPECT_EQ(procfs::read_boot_id(tmp.path()), "0f8e3c47-5b7a-4f63-9d2e-1c0a6b2d7e11");
  std::ofstream(dir + "/boot_id") << "not a boot id\n";
  EXPECT_EQ(procfs::read_boot_id(tmp.path()), "") << "not one";
  EXPECT_EQ(procfs::read_boot_id("/proc").size(), 36u) << "this host's";
}

TEST(Procfs, AFileWrittenWholeReplacesTheOldOneOrLeavesItAsItWasWithNoTemporary) {
  gym::testing::TempDir tmp;
  const std::string file = tmp.path() + "/f";
  const auto text = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string why;
  ASSERT_TRUE(procfs::write_file_whole(file, "one\n", why, 0640)) << why;
  ASSERT_TRUE(procfs::write_file_whole(file, "two\n", why, 0640)) << why;
  EXPECT_EQ(text(file), "two\n");
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
  EXPECT_FALSE(std::filesystem::exists(file + ".new"));

  // A link where the temporary goes is not followed: nothing is written.
  std::ofstream(tmp.path() + "/elsewhere") << "untouched";
  std::filesystem::create_symlink(tmp.path() + "/elsewhere", file + ".new");
  EXPECT_FALSE(procfs::write_file_whole(file, "three\n", why));
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(text(file), "two\n");
  EXPECT_EQ(text(tmp.path() + "/elsewhere"), "untouched");
  std::filesystem::remove(file + ".new");

  // A rename that fails (a directory in the way) leaves no temporary.
  std::filesystem::create_directory(tmp.path() + "/d");
  why.clear();
  EXPECT_FALSE(procfs::write_file_whole(tmp.path() + "/d", "four\n", why));
  EXPECT_FALSE(why.empty());
  EXPECT_FALSE(std::filesystem::exists(tmp.path() + "/d.new"));
  EXPECT_TRUE(std::filesystem::is_directory(tmp.path() + "/d"));
}

TEST(Procfs, MeminfoToleratesOddLines) {
  auto m = procfs::parse_meminfo(
      "MemTotal:1024 kB\n\nUnknownKey: 7 kB\nMemAvailable:   512 kB\nHugePages_Total: 0\n");
  EXPECT_EQ(m.total, 1024u * 1024);
  EXPECT_EQ(m.available, 512u * 1024);
  auto zero = procfs::parse_meminfo("MemTotal: 1024 kB\nMemAvailable: 0 kB\n");
  EXPECT_EQ(zero.available, 0u);
  auto old_kernel =
      procfs::parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 30 kB\n");
  EXPECT_EQ(old_kernel.available, 150u * 1024) << "MemFree + Buffers + Cached without MemAvailable";
  auto nothing = procfs::parse_meminfo("");
  EXPECT_FALSE(nothing.total.has_value());
  EXPECT_FALSE(nothing.available.has_value());
}

TEST(Procfs, SmapsRollupGivesRssPssUssAndSwapOfOneRead) {
  const auto r = procfs::parse_smaps_rollup(
      "00400000-7fff0000 ---p 00000000 00:00 0    [rollup]\n"
      "Rss:  10 kB\nPss:   4 kB\nShared_Clean: 6 kB\nPrivate_Clean: 1 kB\n"
      "Private_Dirty:   3 kB\nSwap: 7 kB\nSwapPss: 2 kB\n");
  EXPECT_EQ(r.rss, 10u * 1024);
  EXPECT_EQ(r.pss, 4u * 1024);
  EXPECT_EQ(r.uss, 4u * 1024) << "Private_Clean + Private_Dirty";
  EXPECT_EQ(r.swap, 7u * 1024) << "Swap, not SwapPss";
  EXPECT_EQ(procfs::parse_smaps_rollup("Rss: 10 kB\n").pss, std::nullopt);
  EXPECT_EQ(procfs::parse_smaps_rollup("Pss: 1 kB\n").rss, std::nullopt);
}

TEST(Procfs, FixtureTreeLinksChildrenNotOlderThanTheirParent) {
  procfs::ProcessTable table(kFixture);
  ASSERT_TRUE(table.scan());
  EXPECT_EQ(table.processes().size(), 9u);
  const procfs::ProcStat* root = table.find(100);
  ASSERT_NE(root, nullptr);
  std::vector<pid_t> pids;
  for (const auto* p : table.tree(*root)) pids.push_back(p->pid);
  std::sort(pids.begin(), pids.end());
  EXPECT_EQ(pids, (std::vector<pid_t>{100, 101, 102, 103, 104, 105}));
  EXPECT_EQ(table.find(100, 999), nullptr) << "same pid, other start time";
  EXPECT_TRUE(table.find(103)->kernel_thread());
  EXPECT_TRUE(table.find(104)->zombie());
}

TEST(Procfs, ScanThroughKeptStatFilesReadsWhatAPlainScanReads) {
  procfs::StatFiles files;
  for (int round = 0; round < 2; ++round) {  // the second through kept descriptors
    procfs::ProcessTable plain(kFixture), kept(kFixture);
    ASSERT_TRUE(plain.scan());
    ASSERT_TRUE(kept.scan(&files));
    ASSERT_EQ(kept.processes().size(), plain.processes().size());
    for (const procfs::ProcStat& p : plain.processes()) {
      const procfs::ProcStat* k = kept.find(p.pid, p.start_ticks);
      ASSERT_NE(k, nullptr) << p.pid;
      EXPECT_EQ(k->rss_pages, p.rss_pages);
      EXPECT_EQ(k->ppid, p.ppid);
    }
    EXPECT_EQ(files.kept(), plain.processes().size());
  }
}

TEST(Procfs, AKeptStatDescriptorNeverReadsAnotherProcessBehindAReusedPid) {
  testing::Gate first_gate, second_gate;
  testing::Ready ready;
  const pid_t first = testing::spawn([&] {
    ::prctl(PR_SET_NAME, "gym-first");  // both may start in one clock tick
    ready.signal();
    first_gate.wait();
    return 0;
  });
  ready.wait(1);
  procfs::StatFiles files;
  std::string text;
  ASSERT_EQ(files.read("/proc", first, text), procfs::ReadStatus::kOk);
  const auto before = procfs::parse_stat(text);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(files.kept(), 1u);
  first_gate.open();
  testing::wait_exit(first);
  const pid_t second = testing::spawn_with_pid(first, second_gate);
  if (second < 0) {
    // Gone, or (tests run in parallel) another process has the pid already:
    // never the first one.
    const procfs::ReadStatus st = files.read("/proc", first, text);
    if (st == procfs::ReadStatus::kOk) {
      const auto other = procfs::parse_stat(text);
      EXPECT_TRUE(!other || other->comm != "gym-first");
    } else {
      EXPECT_EQ(st, procfs::ReadStatus::kGone);
    }
    GTEST_SKIP() << "pid allocation cannot be steered here (needs root, and no other process "
                    "taking pids meanwhile)";
  }
  ASSERT_EQ(files.read("/proc", first, text), procfs::ReadStatus::kOk);
  const auto after = procfs::parse_stat(text);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->pid, first);
  EXPECT_EQ(before->comm, "gym-first");
  EXPECT_NE(after->comm, "gym-first") << "the new process, read afresh";
  second_gate.open();
  testing::wait_exit(second);
  // Unread since the last sweep: closed by the next.
  files.sweep();
  EXPECT_EQ(files.kept(), 1u);
  files.sweep();
  EXPECT_EQ(files.kept(), 0u);
}

TEST(Procfs, StatmGivesSizeAndResidentPagesAndChildrenListsPids) {
  const auto m = procfs::parse_statm("5000 1234 300 20 0 900 0\n");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->size_pages, 5000u);
  EXPECT_EQ(m->resident_pages, 1234u);
  EXPECT_EQ(procfs::parse_statm("0 0 0 0 0 0 0\n")->size_pages, 0u);  // a zombie's
  EXPECT_FALSE(procfs::parse_statm("5000").has_value());
  EXPECT_FALSE(procfs::parse_statm("x 1").has_value());
  EXPECT_EQ(procfs::parse_children("12 345 \n"), (std::vector<pid_t>{12, 345}));
  EXPECT_EQ(procfs::parse_children(""), std::vector<pid_t>{});
  EXPECT_FALSE(procfs::parse_children("12 x ").has_value());
  EXPECT_FALSE(procfs::parse_children("-3 ").has_value());
  EXPECT_FALSE(procfs::parse_children("99999999999 ").has_value());
}

TEST(ProcfsWalk, AProcRootWithoutChildrenFilesIsNotWalkedButScanned) {
  procfs::TreeFiles files(procfs::TreeFiles::Detail::kStatm);
  procfs::ProcessTable table(kFixture);
  EXPECT_FALSE(table.walk({100}, files));
  EXPECT_TRUE(table.processes().empty());
  EXPECT_EQ(files.kept(), 0u);
  EXPECT_FALSE(table.walk({100}, files)) << "known at the second walk too";
}

// The pids of `root`'s tree in `table`, zombies included.
std::set<pid_t> tree_pids(const procfs::ProcessTable& table, pid_t root) {
  std::set<pid_t> out;
  if (const procfs::ProcStat* r = table.find(root))
    for (const procfs::ProcStat* p : table.tree(*r)) out.insert(p->pid);
  return out;
}

TEST(ProcfsWalk, AWalkFindsTheTreeAScanFindsWithChildrenOfEveryThreadAndZombies) {
  testing::Gate gate;
  testing::Ready ready;
  // root ─┬─ a ── g       (forked by the main thread)
  //       ├─ b            (forked by a second thread: listed among its children)
  //       └─ z            (exited, not reaped: a zombie)
  const pid_t root = testing::spawn([&] {
    if (::fork() == 0) {
      if (::fork() == 0) {
        ready.signal();
        gate.wait();
        ::_exit(0);
      }
      ready.signal();
      gate.wait();
      ::_exit(0);
    }
    if (::fork() == 0) ::_exit(0);
    std::thread second([&] {
      if (::fork() == 0) {
        ready.signal();
        gate.wait();
        ::_exit(0);
      }
      gate.wait();  // the thread lives on, with its child
    });
    ready.signal();
    second.join();
    while (::wait(nullptr) > 0) {
    }
    return 0;
  });
  ready.wait(4);
  // Wait for the zombie, and the second thread.
  procfs::ProcessTable scanned("/proc");
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(scanned.scan());
    const std::set<pid_t> pids = tree_pids(scanned, root);
    const bool zombie = std::any_of(pids.begin(), pids.end(), [&](pid_t p) {
      return scanned.find(p) != nullptr && scanned.find(p)->zombie();
    });
    if (zombie && pids.size() == 5 && scanned.find(root)->num_threads == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // All of them blocked now, touching no memory: read again to compare.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(scanned.scan());
  const std::set<pid_t> expected = tree_pids(scanned, root);
  ASSERT_EQ(expected.size(), 5u);

  procfs::TreeFiles stat_files(procfs::TreeFiles::Detail::kStat);
  procfs::TreeFiles statm_files(procfs::TreeFiles::Detail::kStatm);
  for (int round = 0; round < 2; ++round) {  // the second through kept descriptors
    for (procfs::TreeFiles* files : {&stat_files, &statm_files}) {
      procfs::ProcessTable walked("/proc");
      ASSERT_TRUE(walked.walk({root}, *files));
      EXPECT_EQ(tree_pids(walked, root), expected);
      EXPECT_EQ(walked.processes().size(), expected.size()) << "nothing but the tree";
      EXPECT_EQ(files->kept(), expected.size());
      for (pid_t pid : expected) {
        const procfs::ProcStat* w = walked.find(pid);
        const procfs::ProcStat* s = scanned.find(pid);
        ASSERT_NE(w, nullptr);
        EXPECT_EQ(w->start_ticks, s->start_ticks);
        EXPECT_EQ(w->ppid, s->ppid);
        EXPECT_EQ(w->zombie(), s->zombie()) << pid;
        // All of them wait, touching nothing. statm's resident count is
        // stat's rss, summed exactly since Linux 6.x (stat's may lag).
        if (files->detail() == procfs::TreeFiles::Detail::kStat) {
          EXPECT_EQ(w->rss_pages, s->rss_pages) << pid;
        } else {
          std::string statm;
          ASSERT_EQ(procfs::read_file("/proc/" + std::to_string(pid) + "/statm", statm),
                    procfs::ReadStatus::kOk);
          EXPECT_EQ(w->rss_pages, procfs::parse_statm(statm)->resident_pages) << pid;
        }
        if (!s->zombie()) {
          EXPECT_EQ(w->num_threads, s->num_threads) << pid;
        }
      }
      const procfs::TreeUsage u = procfs::tree_usage(walked, *walked.find(root));
      EXPECT_EQ(u.live.size(), 4u) << "the zombie uses nothing";
    }
  }
  // Without descending: the roots alone.
  procfs::ProcessTable roots("/proc");
  ASSERT_TRUE(roots.walk({root, 0, -1}, statm_files, false));
  EXPECT_EQ(roots.processes().size(), 1u);
  gate.open();
  EXPECT_EQ(testing::wait_exit(root), 0);
  procfs::ProcessTable after("/proc");
  ASSERT_TRUE(after.walk({root}, statm_files));
  EXPECT_TRUE(after.processes().empty()) << "gone";
  EXPECT_EQ(statm_files.kept(), 0u) << "its descriptors closed";
}

TEST(ProcfsWalk, BeyondTheDescriptorBudgetAWalkReadsAfreshAndFindsTheSameTree) {
  // In a child whose descriptor limit leaves room to keep only a few
  // processes' files: a root with eight children, walked twice.
  const pid_t child = testing::spawn([] {
    testing::Gate gate;
    std::vector<pid_t> kids;
    for (int i = 0; i < 8; ++i) {
      const pid_t k = testing::spawn([&] {
        gate.wait();
        return 0;
      });
      if (k < 0) return 10;
      kids.push_back(k);
    }
    rlimit lim{};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = 64;  // a budget of 16 descriptors: at most five processes kept
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) return 11;
    procfs::TreeFiles files(procfs::TreeFiles::Detail::kStatm);
    for (int round = 0; round < 2; ++round) {
      procfs::ProcessTable table("/proc");
      if (!table.walk({::getpid()}, files)) return 12;
      if (tree_pids(table, ::getpid()).size() != 9) return 13;
      for (pid_t k : kids)
        if (table.find(k) == nullptr || table.find(k)->rss_pages == 0) return 14;
      if (files.kept() * 3 > 16) return 15;  // never beyond the budget
    }
    gate.open();
    for (pid_t k : kids) testing::wait_exit(k);
    return 0;
  });
  EXPECT_EQ(testing::wait_exit(child), 0);
}

TEST(ProcfsWalk, NoDescriptorLeftFailsThatWalkNotTheLaterOnes) {
  // In a child: with room for two more descriptors, a walk cannot open a
  // process's files (EMFILE): it fails, and the caller scans this time; with
  // the limit back, walks work again (the kernel's children files are not
  // taken for missing).
  const pid_t child = testing::spawn([] {
    procfs::TreeFiles files(procfs::TreeFiles::Detail::kStatm);
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 10;
    const rlim_t normal = lim.rlim_cur;
    int open_now = 0;
    for (int fd = 0; fd < 1024; ++fd) open_now += ::fcntl(fd, F_GETFD) != -1;
    lim.rlim_cur = rlim_t(open_now) + 2;  // /proc/<pid> and its stat, no more
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) return 11;
    procfs::ProcessTable table("/proc");
    if (table.walk({::getpid()}, files)) return 12;
    if (!table.processes().empty()) return 13;
    lim.rlim_cur = normal;
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) return 14;
    if (!table.walk({::getpid()}, files)) return 15;
    if (table.find(::getpid()) == nullptr) return 16;
    return 0;
  });
  EXPECT_EQ(testing::wait_exit(child), 0);
}

TEST(ProcfsWalk, AKeptDescriptorNeverReadsAnotherProcessBehindAReusedPid) {
  testing::Gate first_gate, second_gate;
  testing::Ready ready;
  const pid_t first = testing::spawn([&] {
    ::prctl(PR_SET_NAME, "gym-first");
    ready.signal();
    first_gate.wait();
    return 0;
  });
  ready.wait(1);
  // statm's walk keeps what stat said at first sight: it must see the
  // process behind the pid change.
  procfs::TreeFiles files(procfs::TreeFiles::Detail::kStatm);
  procfs::ProcessTable table("/proc");
  ASSERT_TRUE(table.walk({first}, files));
  ASSERT_NE(table.find(first), nullptr);
  const uint64_t start = table.find(first)->start_ticks;
  EXPECT_EQ(table.find(first)->comm, "gym-first");
  first_gate.open();
  testing::wait_exit(first);
  const pid_t second = testing::spawn_with_pid(first, second_gate);
  ASSERT_TRUE(table.walk({first}, files));
  if (second < 0) {
    if (const procfs::ProcStat* p = table.find(first)) {
      EXPECT_NE(p->comm, "gym-first");
    }
    GTEST_SKIP() << "pid allocation cannot be steered here (needs root, and no other process "
                    "taking pids meanwhile)";
  }
  const procfs::ProcStat* p = table.find(first);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(p->comm, "gym-first") << "the new process, read afresh";
  EXPECT_GE(p->start_ticks, start);
  second_gate.open();
  testing::wait_exit(second);
}

TEST(Procfs, OpenFdsAreCountedAsListed) {
  const std::optional<uint64_t> n = procfs::count_open_fds("/proc", ::getpid());
  ASSERT_TRUE(n.has_value());
  size_t listed = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)e;
    ++listed;
  }
  // The listing holds one more descriptor: its own directory's.
  EXPECT_EQ(*n + 1, listed);
  EXPECT_FALSE(procfs::count_open_fds("/proc", 0).has_value());
}

}  // namespace
}  // namespace gym::exporter
