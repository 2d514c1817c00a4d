// The table of phases, and the sums and JSON made from it, so that a new phase is one line in
// the struct and one in the table.
#include "datagen/phases.h"

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

}  // namespace convoy::datagen
