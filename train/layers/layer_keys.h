// One [[layer]] table as an op reads its own keys from it: typed getters whose mistakes are
// reported as "<file>:<line>: <reason>" (the reader of the config file implements it).
#pragma once
#include <optional>
#include <string>

namespace convoy {

class LayerKeys {
 public:
  virtual ~LayerKeys() = default;
  virtual const std::string& name() const = 0;  // the layer's, for messages
  // A key's value, or `def` where it is absent; one of another type or outside [lo, hi] is refused.
  virtual int get_int(const char* key, int def, int lo, int hi) const = 0;
  virtual double get_num(const char* key, double def, double lo, double hi) const = 0;
  virtual bool get_bool(const char* key, bool def) const = 0;
  // A key's value where it is there and a string (a key that takes a number or a word).
  virtual std::optional<std::string> get_string(const char* key) const = 0;
  // A mistake at the layer's line, or at the line of one of its keys (which must be there).
  [[noreturn]] virtual void fail(const std::string& why) const = 0;
  [[noreturn]] virtual void fail_at(const char* key, const std::string& why) const = 0;
};

}  // namespace convoy
