// The one line parse_net_config throws for a config text (as from a file named bad.toml), or "" where
// it parses: the config tests' way to hold a refusal's wording.
#pragma once
#include <string>

#include "shared/error.h"
#include "train/net_config.h"

namespace convoy::test {

inline std::string config_error(const std::string& text) {
  try {
    parse_net_config(text, "bad.toml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace convoy::test
