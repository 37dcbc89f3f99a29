// write_file_atomic against what may already sit at an output path (a device node, a FIFO, a
// process's descriptor link, a link to a file, a link another user planted), and the clean-up
// of stale temporaries, which removes exactly the temporaries of the files it is given.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bppsa/core/error.hpp>
#include <bppsa/io/file.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "temp_dir.hpp"

namespace {

using namespace bppsa;
using testutil::message_of;
using testutil::TempDir;
using Bytes = std::vector<unsigned char>;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

struct stat lstat_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st;
}

std::string contents(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::size_t entries(const fs::path& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

/// A pid that no longer runs: a child that has exited and been reaped.
long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

// A private null device (mknod needs root; the system's /dev/null is never put at risk).
TEST(WriteFileAtomic, DeviceNodeIsWrittenNotReplaced) {
  TempDir dir;
  const fs::path dev = dir.path / "null";
  if (::mknod(dev.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) != 0) GTEST_SKIP() << "mknod needs root here";
  const struct stat before = lstat_of(dev);
  write_file_atomic(dev, Bytes{1, 2, 3});
  const fs::path link = dir.path / "out.bin";
  fs::create_symlink(dev, link);
  write_file_atomic(link, std::string_view("through a link"));
  const struct stat after = lstat_of(dev);
  EXPECT_TRUE(S_ISCHR(after.st_mode));
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_rdev, before.st_rdev);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(entries(dir.path), 2u);  // no temporary left
}

TEST(WriteFileAtomic, FifoIsWrittenNotReplaced) {
  TempDir dir;
  const fs::path fifo = dir.path / "out.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const fs::path spare = dir.path / "spare.fifo";  // a second name of the FIFO: unblocks the reader on failure
  ASSERT_EQ(::link(fifo.c_str(), spare.c_str()), 0);
  auto reader = std::async(std::launch::async, [&] { return contents(fifo); });
  std::string failure;
  try {
    write_file_atomic(fifo, std::string_view("{\"ok\": true}\n"));
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (reader.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    const int fd = ::open(spare.c_str(), O_WRONLY | O_NONBLOCK);  // the FIFO was not written: end the reader
    if (fd >= 0) ::close(fd);
    failure += " (the reader was never given the output)";
  }
  EXPECT_EQ(failure, "");
  EXPECT_EQ(reader.get(), failure.empty() ? "{\"ok\": true}\n" : "");
  EXPECT_TRUE(S_ISFIFO(lstat_of(fifo).st_mode));
  EXPECT_EQ(entries(dir.path), 2u);  // the FIFO's two names, no temporary
}

// --json /dev/stdout: the process's descriptor, not a file put in place of the link.
TEST(WriteFileAtomic, DescriptorLinkIsWrittenDirectly) {
  TempDir dir;
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  const fs::path link = dir.path / "stdout";
  fs::create_symlink("/proc/self/fd/" + std::to_string(p[1]), link);
  write_file_atomic(link, std::string_view("to the pipe"));
  ::close(p[1]);
  std::string got(64, '\0');
  got.resize(static_cast<std::size_t>(std::max<ssize_t>(0, ::read(p[0], got.data(), got.size()))));
  ::close(p[0]);
  EXPECT_EQ(got, "to the pipe");
  EXPECT_TRUE(fs::is_symlink(link));

  // A regular file behind the descriptor (`> out.txt`) is appended to, after what was written.
  const fs::path file = dir.path / "out.txt";
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "log\n", 4), 4);
  write_file_atomic("/proc/self/fd/" + std::to_string(fd), std::string_view("json\n"));
  ::close(fd);
  EXPECT_EQ(contents(file), "log\njson\n");
}

TEST(WriteFileAtomic, LinkToFileReplacesTheFileAndKeepsTheLink) {
  TempDir dir;
  fs::create_directories(dir.path / "runs");
  const fs::path real = dir.path / "runs" / "r1.bin";
  testutil::write_bytes(real, Bytes{1});
  const fs::path link = dir.path / "latest.bin";
  fs::create_symlink("runs/r1.bin", link);
  write_file_atomic(link, Bytes{7, 8});
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(fs::read_symlink(link), "runs/r1.bin");
  EXPECT_EQ(read_file(real), (Bytes{7, 8}));
  EXPECT_EQ(entries(dir.path), 2u);
  EXPECT_EQ(entries(dir.path / "runs"), 1u);
}

TEST(WriteFileAtomic, LinkToNothingIsRefused) {
  TempDir dir;
  const fs::path link = dir.path / "out.bin";
  fs::create_symlink(dir.path / "missing" / "x.bin", link);
  EXPECT_THAT(message_of<IoError>([&] { write_file_atomic(link, Bytes{1}); }),
              ::testing::AllOf(HasSubstr(link.string()), HasSubstr("does not exist")));
  EXPECT_FALSE(fs::exists(dir.path / "missing"));
}

// A link owned by another user (as if planted in a shared folder) to a file of ours: refused,
// the file untouched. Changing a link's owner needs root.
TEST(WriteFileAtomic, LinkPlantedByAnotherUserIsRefused) {
  TempDir dir;
  const fs::path victim = dir.path / "victim";
  testutil::write_bytes(victim, Bytes{4, 2});
  const fs::path link = dir.path / "out.bin";
  fs::create_symlink(victim, link);
  if (::lchown(link.c_str(), 65534, 65534) != 0 || lstat_of(dir.path).st_uid == 65534)
    GTEST_SKIP() << "cannot give a link to another user here (needs root)";
  EXPECT_THAT(message_of<IoError>([&] {
                write_file_atomic(link, Bytes{6, 6, 6});
              }),
              ::testing::AllOf(HasSubstr(link.string()), HasSubstr("owned by user 65534")));
  EXPECT_EQ(read_file(victim), (Bytes{4, 2}));
  EXPECT_TRUE(fs::is_symlink(link));
  // One hop further: our link to their link is refused just the same.
  const fs::path ours = dir.path / "ours.bin";
  fs::create_symlink(link, ours);
  EXPECT_THAT(message_of<IoError>([&] { write_file_atomic(ours, Bytes{6}); }), HasSubstr("owned by user 65534"));
  EXPECT_EQ(read_file(victim), (Bytes{4, 2}));
}

TEST(WriteFileAtomic, FailureToCreateTheTemporaryNamesTheUsersPath) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into a read-only folder";
  TempDir dir;
  const fs::path p = dir.path / "ro" / "f.bin";
  fs::create_directories(p.parent_path());
  fs::permissions(p.parent_path(), fs::perms::owner_read | fs::perms::owner_exec);
  const std::string m = message_of<IoError>([&] { write_file_atomic(p, Bytes{1}); });
  fs::permissions(p.parent_path(), fs::perms::owner_all);
  EXPECT_THAT(m, ::testing::AllOf(HasSubstr("cannot write '" + p.string() + "'"), HasSubstr("Permission denied")));
}

// Issue 44: a save of d.safetensors deleted .dotfile.tmp.…, .d-notes.tmp.… and another
// checkpoint's .dd.safetensors.tmp.… (the names started with ".d").
TEST(RemoveStaleTemporaries, RemovesExactlyTheTemporariesOfItsFiles) {
  TempDir dir;
  const long dead = dead_pid();
  const std::string d = std::to_string(dead);
  const std::vector<std::string> ours = {".d.safetensors.tmp." + d + ".0", ".d.safetensors.tmp." + d + ".17"};
  const std::vector<std::string> others = {".dotfile.tmp." + d + ".0",
                                           ".d-notes.tmp." + d + ".1",
                                           ".dd.safetensors.tmp." + d + ".0",
                                           ".d.safetensors.tmp.x.0",
                                           ".d.safetensors.tmp." + d,
                                           ".d.safetensors.tmp." + d + ".0.bak",
                                           "d.safetensors.tmp." + d + ".0",
                                           ".d.safetensors.tmp." + std::to_string(::getpid()) + ".0",
                                           ".d.safetensors"};
  for (const auto& n : ours) testutil::write_bytes(dir.path / n, Bytes{1});
  for (const auto& n : others) testutil::write_bytes(dir.path / n, Bytes{1});
  EXPECT_EQ(remove_stale_temporaries(dir.path / "d"), 0);  // not a prefix: only ".d.tmp.PID.N"
  EXPECT_EQ(remove_stale_temporaries(dir.path / "d.safetensors"), 2);
  for (const auto& n : ours) EXPECT_FALSE(fs::exists(dir.path / n)) << n;
  for (const auto& n : others) EXPECT_TRUE(fs::exists(dir.path / n)) << n;

  // The predicate form: exactly the names it accepts.
  testutil::write_bytes(dir.path / (".a.optim.1-x.tmp." + d + ".3"), Bytes{1});
  EXPECT_EQ(remove_stale_temporaries(dir.path, [](std::string_view n) { return n == "a.optim.1-x"; }), 1);
  EXPECT_EQ(entries(dir.path), others.size());
}

}  // namespace
