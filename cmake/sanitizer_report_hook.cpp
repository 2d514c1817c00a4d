// Linked into every program of a CONVOY_SANITIZE or CONVOY_TSAN build: each report's summary line is
// also appended to the file CONVOY_SANITIZER_LOG names, so that no report hides behind a discarded stderr.
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

// Called by the ASan, UBSan and TSan runtimes (a weak symbol there) once per report, with its summary.
// UBSan calls it only with print_summary=1 and print_stacktrace=1. Plain system calls: the process may be in a bad way.
extern "C" void __sanitizer_report_error_summary(const char* summary) {
  const size_t n = std::strlen(summary);
  char line[1024];
  const size_t k = n < sizeof line - 1 ? n : sizeof line - 1;
  std::memcpy(line, summary, k);
  line[k] = '\n';
  (void)!::write(2, line, k + 1);  // where the runtime's own version prints it
  const char* path = std::getenv("CONVOY_SANITIZER_LOG");
  if (!path || !*path) return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!::write(fd, line, k + 1);  // one write per line: O_APPEND keeps concurrent processes' lines whole
  ::close(fd);
}
