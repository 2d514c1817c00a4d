// The table of phases, and the sums and JSON made from it, so that a new phase is one line in
// the struct and one in the table.
#include "datagen/phases.h"

#include <cstdio>
#include <iterator>

namespace convoy::datagen {

const std::array<PhaseField, kPhaseCount> kPhaseFields = {{
    {"read", &Phases::read, false},
    {"decode", &Phases::decode, false},
    {"resize", &Phases::resize, false},
    {"encode", &Phases::encode, false},
    {"stats", &Phases::stats, false},
    {"assemble", &Phases::assemble, false},
    {"write", &Phases::write, false},
    {"wait", &Phases::wait, false},
    {"gpu_stage", &Phases::gpu_stage, true},
    {"gpu_upload", &Phases::gpu_upload, true},
    {"gpu_kernel", &Phases::gpu_kernel, true},
    {"gpu_download", &Phases::gpu_download, true},
    {"gpu_wait", &Phases::gpu_wait, true},
    {"gpu_images", &Phases::gpu_images, true},
    {"cpu_images", &Phases::cpu_images, true},
}};

Phases& Phases::operator+=(const Phases& o) {
  for (const PhaseField& f : kPhaseFields) this->*f.member += o.*f.member;
  return *this;
}

nlohmann::json Phases::to_json(bool gpu) const {
  nlohmann::json j = nlohmann::json::object();
  for (const PhaseField& f : kPhaseFields)
    if (gpu || !f.gpu) j[f.name] = this->*f.member;
  return j;
}

namespace {

struct StepField {
  const char* name;  // in dataset.json
  const char* text;  // in the log
  double Steps::*member;
};

constexpr StepField kStepFields[] = {
    {"exec", "exec", &Steps::exec},       {"mpi_init", "MPI init", &Steps::mpi_init},
    {"index", "index", &Steps::index},    {"broadcast", "broadcast", &Steps::broadcast},
    {"plan", "plan", &Steps::plan},       {"setup", "set-up", &Steps::setup},
    {"files", "files", &Steps::files},    {"drain", "last writes", &Steps::drain},
    {"reduce", "reduce", &Steps::reduce}, {"finish", "finish", &Steps::finish},
};
static_assert(sizeof(Steps) == std::size(kStepFields) * sizeof(double), "kStepFields must name every step");

}  // namespace

double Steps::total() const {
  double s = 0;
  for (const StepField& f : kStepFields) s += this->*f.member;
  return s;
}

nlohmann::json Steps::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const StepField& f : kStepFields)
    if (f.member != &Steps::finish) j[f.name] = this->*f.member;
  return j;
}

std::string Steps::text() const {
  std::string out;
  char buf[64];
  for (const StepField& f : kStepFields) {
    std::snprintf(buf, sizeof buf, "%s%s %.2f", out.empty() ? "" : ", ", f.text, this->*f.member);
    out += buf;
  }
  return out;
}

}  // namespace convoy::datagen
