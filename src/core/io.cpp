#include <attend/error.h>
#include <attend/io.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace attend {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  check(!fs::is_directory(path), "{}: is a directory, expected a file", path.string());
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "{}: cannot open for reading: {}", path.string(), std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  check(!in.bad(), "{}: read failed", path.string());
  return s.str();
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  // A name of our own beside the target (same file system, so the rename is atomic).
  const fs::path tmp = fs::path(path).concat(fmt::format(".tmp.{}", ::getpid()));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  // The target named first; a missing directory said as such (the temporary name alone was what the message named).
  check(fd >= 0 || errno != ENOENT, "{}: cannot write it: the directory {} does not exist", path.string(),
        fs::absolute(path).parent_path().string());
  check(fd >= 0, "{}: cannot write it: {}", path.string(), std::strerror(errno));
  auto fail = [&](std::string_view what) {
    const std::string reason = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(fmt::format("{}: {} failed: {}", path.string(), what, reason));
  };
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("write");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw Error(fmt::format("{}: close failed: {}", path.string(), std::strerror(errno)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error(fmt::format("{}: cannot rename {} into place: {}", path.string(), tmp.string(), reason));
  }
}

}  // namespace attend
