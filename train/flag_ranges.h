// The ranges of train's numeric flags: a CLI11 check that refuses a value out of its range at parse
// time in one line naming the flag and the range, so that no value is ignored or taken for a default.
#pragma once
#include <CLI/CLI.hpp>

#include <limits>
#include <string>
#include <type_traits>

namespace convoy {

// "--epochs: must be a whole number from 1 to 2147483647, not 0". An unsigned flag refuses a minus
// sign, which CLI11's conversion would otherwise wrap around to a huge value.
template <typename T>
CLI::Validator within(T lo, T hi = std::numeric_limits<T>::max()) {
  static_assert(std::is_arithmetic<T>::value, "a numeric flag");
  const std::string range = std::is_integral<T>::value
                                ? "a whole number from " + std::to_string(lo) + " to " + std::to_string(hi)
                                : "a number of at least " + CLI::detail::to_string(lo) +
                                      (hi < std::numeric_limits<T>::max() ? " and at most " + CLI::detail::to_string(hi)
                                                                          : std::string());
  auto check = [lo, hi, range](std::string& given) -> std::string {
    T value{};
    const bool sign_ok = !std::is_unsigned<T>::value || given.find('-') == std::string::npos;
    // Written so that a NaN fails both comparisons.
    if (sign_ok && CLI::detail::lexical_cast(given, value) && value >= lo && value <= hi) return "";
    return "must be " + range + ", not " + given;
  };
  return CLI::Validator(check, "", "");
}

}  // namespace convoy
