// LD_PRELOAD shim for the I/O-fault tests: fails with EIO, or shortens, the Nth call of one kind on
// files whose path contains a given string, so a test can put a disk error at a chosen point of a run.
//
// CONVOY_FAULT_PATH  substring of the path given to open/openat (only fds opened so are watched)
// CONVOY_FAULT_OP    read | pread | write | pwrite | fsync (pread and pwrite include the *64 names,
//                    fsync includes fdatasync)
// CONVOY_FAULT_NTH   the matching call to fault, counting from 1 over all threads; 0 only counts
// CONVOY_FAULT_MODE  eio (the call fails with EIO), short (it moves half the bytes asked, at least
//                    one; calls asking for fewer than 2 bytes are not counted then) or stall (it sleeps
//                    CONVOY_FAULT_STALL_MS milliseconds, default 5000, and then runs: a hung network
//                    file system)
// CONVOY_FAULT_RELEASE optional file: a stall ends as soon as it exists, so that a test can act
//                    while the program waits at a known point and then let it go on at once
// CONVOY_FAULT_LOG   optional file: a line "fault <op> <mode> call <n> <path>" when the fault fires,
//                    and "calls <n>" at exit when any matched, so a test can tell the fault really
//                    happened and count the calls of a run.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

enum op { OP_NONE, OP_READ, OP_PREAD, OP_WRITE, OP_PWRITE, OP_FSYNC };
enum { MAX_FD = 65536 };

static const char* want_path;
static const char* want_op_name;
static const char* log_path;
static const char* release_path;
static enum op want_op = OP_NONE;
static long nth;
static int mode_short;
static int mode_stall;
static long stall_ms;

// An fd is watched from the open that named a matching path until its close. Paths are kept only
// to name the file in the log line.
static atomic_uchar watched[MAX_FD];
static char* names[MAX_FD];
static pthread_mutex_t names_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_long calls;

static int (*real_open)(const char*, int, ...);
static int (*real_open64)(const char*, int, ...);
static int (*real_openat)(int, const char*, int, ...);
static int (*real_openat64)(int, const char*, int, ...);
static int (*real_close)(int);
static ssize_t (*real_read)(int, void*, size_t);
static ssize_t (*real_pread)(int, void*, size_t, off_t);
static ssize_t (*real_pread64)(int, void*, size_t, off64_t);
static ssize_t (*real_write)(int, const void*, size_t);
static ssize_t (*real_pwrite)(int, const void*, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void*, size_t, off64_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void setup(void) {
  real_open = dlsym(RTLD_NEXT, "open");
  real_open64 = dlsym(RTLD_NEXT, "open64");
  real_openat = dlsym(RTLD_NEXT, "openat");
  real_openat64 = dlsym(RTLD_NEXT, "openat64");
  real_close = dlsym(RTLD_NEXT, "close");
  real_read = dlsym(RTLD_NEXT, "read");
  real_pread = dlsym(RTLD_NEXT, "pread");
  real_pread64 = dlsym(RTLD_NEXT, "pread64");
  real_write = dlsym(RTLD_NEXT, "write");
  real_pwrite = dlsym(RTLD_NEXT, "pwrite");
  real_pwrite64 = dlsym(RTLD_NEXT, "pwrite64");
  real_fsync = dlsym(RTLD_NEXT, "fsync");
  real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
  want_path = getenv("CONVOY_FAULT_PATH");
  want_op_name = getenv("CONVOY_FAULT_OP");
  log_path = getenv("CONVOY_FAULT_LOG");
  release_path = getenv("CONVOY_FAULT_RELEASE");
  const char* n = getenv("CONVOY_FAULT_NTH");
  const char* mode = getenv("CONVOY_FAULT_MODE");
  nth = n ? atol(n) : 0;
  mode_short = mode && strcmp(mode, "short") == 0;
  mode_stall = mode && strcmp(mode, "stall") == 0;
  const char* ms = getenv("CONVOY_FAULT_STALL_MS");
  stall_ms = ms ? atol(ms) : 5000;
  if (!want_path || !*want_path || !want_op_name) return;
  if (strcmp(want_op_name, "read") == 0)
    want_op = OP_READ;
  else if (strcmp(want_op_name, "pread") == 0)
    want_op = OP_PREAD;
  else if (strcmp(want_op_name, "write") == 0)
    want_op = OP_WRITE;
  else if (strcmp(want_op_name, "pwrite") == 0)
    want_op = OP_PWRITE;
  else if (strcmp(want_op_name, "fsync") == 0 && !mode_short)
    want_op = OP_FSYNC;
}

static void init(void) { pthread_once(&once, setup); }

static void append_log(const char* line) {
  if (!log_path) return;
  const int fd = real_open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!real_write(fd, line, strlen(line));
  real_close(fd);
}

static void watch(int fd, const char* path) {
  if (fd < 0 || fd >= MAX_FD || want_op == OP_NONE || !path || !strstr(path, want_path)) return;
  char* copy = strdup(path);
  pthread_mutex_lock(&names_mu);
  free(names[fd]);
  names[fd] = copy;
  pthread_mutex_unlock(&names_mu);
  atomic_store(&watched[fd], 1);
}

// Sleeps stall_ms, or less where the release file appears first (looked for every 10 ms).
static void stall(void) {
  const long step_ms = release_path ? 10 : stall_ms;
  for (long slept = 0; slept < stall_ms; slept += step_ms) {
    if (release_path && access(release_path, F_OK) == 0) return;
    const struct timespec t = {step_ms / 1000, (step_ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
  }
}

// Whether this call is the one to fault; counts it when it matches.
static int fault_here(int fd, enum op op, size_t n) {
  init();
  if (op != want_op || fd < 0 || fd >= MAX_FD || !atomic_load(&watched[fd])) return 0;
  if (mode_short && n < 2) return 0;
  const long k = atomic_fetch_add(&calls, 1) + 1;
  if (k != nth) return 0;
  char line[4200];
  pthread_mutex_lock(&names_mu);
  snprintf(line, sizeof line, "fault %s %s call %ld %s\n", want_op_name,
           mode_short   ? "short"
           : mode_stall ? "stall"
                        : "eio",
           k, names[fd] ? names[fd] : "?");
  pthread_mutex_unlock(&names_mu);
  append_log(line);
  if (!mode_stall) return 1;
  stall();
  return 0;  // then the call runs as asked
}

__attribute__((destructor)) static void report_calls(void) {
  init();
  // Processes that never met the file (MPI's helpers inherit the preload too) stay silent.
  if (want_op == OP_NONE || atomic_load(&calls) == 0) return;
  char line[64];
  snprintf(line, sizeof line, "calls %ld\n", atomic_load(&calls));
  append_log(line);
}

static mode_t mode_arg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char* path, int flags, ...) {
  init();
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  const int fd = real_open(path, flags, mode);
  watch(fd, path);
  return fd;
}

int open64(const char* path, int flags, ...) {
  init();
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  const int fd = real_open64(path, flags, mode);
  watch(fd, path);
  return fd;
}

int openat(int dir, const char* path, int flags, ...) {
  init();
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  const int fd = real_openat(dir, path, flags, mode);
  watch(fd, path);
  return fd;
}

int openat64(int dir, const char* path, int flags, ...) {
  init();
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_arg(flags, ap);
  va_end(ap);
  const int fd = real_openat64(dir, path, flags, mode);
  watch(fd, path);
  return fd;
}

int close(int fd) {
  init();
  // Unwatched before the real close: once closed, another thread may get the same number.
  if (fd >= 0 && fd < MAX_FD && atomic_exchange(&watched[fd], 0)) {
    pthread_mutex_lock(&names_mu);
    free(names[fd]);
    names[fd] = NULL;
    pthread_mutex_unlock(&names_mu);
  }
  return real_close(fd);
}

ssize_t read(int fd, void* buf, size_t n) {
  if (!fault_here(fd, OP_READ, n)) return real_read(fd, buf, n);
  if (!mode_short) return errno = EIO, -1;
  return real_read(fd, buf, n / 2);
}

ssize_t pread(int fd, void* buf, size_t n, off_t off) {
  if (!fault_here(fd, OP_PREAD, n)) return real_pread(fd, buf, n, off);
  if (!mode_short) return errno = EIO, -1;
  return real_pread(fd, buf, n / 2, off);
}

ssize_t pread64(int fd, void* buf, size_t n, off64_t off) {
  if (!fault_here(fd, OP_PREAD, n)) return real_pread64(fd, buf, n, off);
  if (!mode_short) return errno = EIO, -1;
  return real_pread64(fd, buf, n / 2, off);
}

ssize_t write(int fd, const void* buf, size_t n) {
  if (!fault_here(fd, OP_WRITE, n)) return real_write(fd, buf, n);
  if (!mode_short) return errno = EIO, -1;
  return real_write(fd, buf, n / 2);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  if (!fault_here(fd, OP_PWRITE, n)) return real_pwrite(fd, buf, n, off);
  if (!mode_short) return errno = EIO, -1;
  return real_pwrite(fd, buf, n / 2, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off64_t off) {
  if (!fault_here(fd, OP_PWRITE, n)) return real_pwrite64(fd, buf, n, off);
  if (!mode_short) return errno = EIO, -1;
  return real_pwrite64(fd, buf, n / 2, off);
}

int fsync(int fd) {
  if (!fault_here(fd, OP_FSYNC, 2)) return real_fsync(fd);
  return errno = EIO, -1;
}

int fdatasync(int fd) {
  if (!fault_here(fd, OP_FSYNC, 2)) return real_fdatasync(fd);
  return errno = EIO, -1;
}
