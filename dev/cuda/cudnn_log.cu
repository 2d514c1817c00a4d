// cudnn_log.h: CONVOY_CUDNN_LOG turned into cuDNN's own logging variables, the program run again so
// that cuDNN reads them as it starts.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "dev/cuda/cudnn_log.h"

namespace convoy::gpu {
namespace {

bool set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

// This process's arguments, from /proc (static initialisers, which call this too, have no argv).
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < all.size();) {
    const size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end == std::string::npos ? std::string::npos : end - at));
    at = end == std::string::npos ? all.size() : end + 1;
  }
  return args;
}

}  // namespace

bool cudnn_log_from_env() {
  if (!set("CONVOY_CUDNN_LOG") && !set("CUDNN_LOGLEVEL_DBG")) return false;
  if (!set("CUDNN_LOGLEVEL_DBG")) {
    setenv("CUDNN_LOGLEVEL_DBG", "2", 1);
    if (!std::getenv("CUDNN_LOGDEST_DBG")) setenv("CUDNN_LOGDEST_DBG", "stderr", 1);
    std::vector<std::string> args = own_arguments();
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (!args.empty()) execv("/proc/self/exe", argv.data());
    // Where running again failed, cuDNN may still read the variables at its first call.
    std::fprintf(stderr, "cuDNN log: could not run again (%s); set CUDNN_LOGLEVEL_DBG=2 yourself\n",
                 std::strerror(errno));
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::fprintf(stderr, "cuDNN log on: CUDNN_LOGLEVEL_DBG=%s CUDNN_LOGDEST_DBG=%s\n", std::getenv("CUDNN_LOGLEVEL_DBG"),
               std::getenv("CUDNN_LOGDEST_DBG") ? std::getenv("CUDNN_LOGDEST_DBG") : "(cuDNN's default)");
  return true;
}

}  // namespace convoy::gpu
