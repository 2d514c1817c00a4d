// The regular-file check, with the kind of file found instead named in the message.
#include "shared/regular_file.h"

#include "shared/error.h"

namespace convoy {

void require_regular_file(const std::string& path, const struct stat& st) {
  if (S_ISREG(st.st_mode)) return;
  const char* kind = S_ISFIFO(st.st_mode)   ? "a named pipe"
                     : S_ISDIR(st.st_mode)  ? "a folder"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "an unknown kind of file";
  fail_file(path, std::string("not a regular file (") + kind + ")");
}

}  // namespace convoy
