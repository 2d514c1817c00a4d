// Checks for datagen's command line that CLI11 does not ship: each refuses a value when the command
// line is read, and CLI11 puts the flag's name before the reason, so every refusal is one line.
#pragma once
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>

namespace convoy::datagen {

// Decimal digits only, from min to max: an unsigned flag would otherwise take "-1" as its largest value.
inline CLI::Validator whole_number(uint64_t min, uint64_t max) {
  return CLI::Validator(
      [min, max](std::string& s) -> std::string {
        const bool digits = !s.empty() && s.size() < 20 && s.find_first_not_of("0123456789") == std::string::npos;
        const uint64_t v = digits ? std::stoull(s) : 0;
        if (digits && v >= min && v <= max) return "";
        return "must be a whole number from " + std::to_string(min) + " to " + std::to_string(max) + ", not '" + s +
               "'";
      },
      "WHOLE");
}

// A finite number of at least `min` (above `min` when `inclusive` is false); nan is no number.
inline CLI::Validator finite_number(double min, bool inclusive) {
  return CLI::Validator(
      [min, inclusive](std::string& s) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(s, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != s.size() || !std::isfinite(v)) return "'" + s + "' is not a finite number";
        if (inclusive ? v < min : v <= min)
          return "must be " + std::string(inclusive ? "at least " : "more than ") + std::to_string(min) + ", not " + s;
        return "";
      },
      "NUMBER");
}

// --resize: crop, squash, or short:S with S a whole number from 1 to 16384 (plain "short" takes
// --size's S).
inline CLI::Validator resize_choice() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s == "crop" || s == "squash" || s == "short") return "";
        const std::string side = s.rfind("short:", 0) == 0 ? s.substr(6) : "";
        const bool digits = !side.empty() && side.size() < 6 &&
                            side.find_first_not_of("0123456789") == std::string::npos;
        if (digits && std::stoi(side) >= 1 && std::stoi(side) <= 16384) return "";
        return "must be crop, squash or short:S (S a whole number from 1 to 16384), not '" + s + "'";
      },
      "POLICY");
}

// A file to be written at the end of the run: its folder must exist now, not after the work.
inline CLI::Validator writable_place() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        if (s == "-") return "";
        std::filesystem::path folder = std::filesystem::path(s).parent_path();
        if (folder.empty()) folder = ".";
        std::error_code ec;
        return std::filesystem::is_directory(folder, ec) ? "" : "folder '" + folder.string() + "' does not exist";
      },
      "FILE");
}

}  // namespace convoy::datagen
