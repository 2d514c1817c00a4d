// The step factory of a build without CUDA: the CPU backend only. A CUDA build uses
// step_factory.cu instead.
#include "train/step.h"

#ifndef CONVOY_HAVE_CUDA
#include "shared/error.h"
#include "train/cpu_step.h"

namespace convoy {

Backend choose_backend(Device device) {
  if (device == Device::cuda)
    fail("--device cuda: this build has only the CPU backend (nvcc was not found when it was built)");
  return Backend::cpu;
}

bool fp8_wire_supported(Device, int) { return false; }

std::unique_ptr<Step> make_step(Backend, const StepSetup& s) { return make_cpu_step(s); }

}  // namespace convoy
#endif
