// The spellings of train's named choices: one table each, read by the command line and by the
// log lines that name the choice.
#include "train/train_options.h"

#include "train/int4_wire.h"

namespace convoy {

const Names<Device>& device_names() {
  static const Names<Device> names{{"cpu", Device::cpu}, {"cuda", Device::cuda}, {"auto", Device::automatic}};
  return names;
}

const Names<Precision>& precision_names() {
  static const Names<Precision> names{{"fp32", Precision::fp32}, {"tf32", Precision::tf32}, {"bf16", Precision::bf16}};
  return names;
}

const Names<InputFold>& input_fold_names() {
  static const Names<InputFold> names{
      {"patches", InputFold::patches}, {"blocks", InputFold::blocks}, {"none", InputFold::none}};
  return names;
}

const Names<ConvAlgos>& conv_algos_names() {
  static const Names<ConvAlgos> names{
      {"heuristic", ConvAlgos::heuristic}, {"measure", ConvAlgos::measure}, {"fastest", ConvAlgos::fastest}};
  return names;
}

const Names<GradComm>& grad_comm_names() {
  static const Names<GradComm> names{{"auto", GradComm::automatic}, {"bf16", GradComm::bf16},
                                     {"fp32", GradComm::fp32},      {"fp8", GradComm::fp8},
                                     {"int4", GradComm::int4},      {"fp8-int4", GradComm::fp8_int4}};
  return names;
}

const Names<SampleOrder>& order_names() {
  static const Names<SampleOrder> names{{order_name(SampleOrder::local), SampleOrder::local},
                                        {order_name(SampleOrder::global), SampleOrder::global}};
  return names;
}

GradComm grad_comm_for(GradComm asked, Precision precision, CommReach reach) {
  if (asked != GradComm::automatic) return asked;
  if (precision == Precision::fp32) return GradComm::fp32;
  return reach.hosts > 1 && reach.fp8 ? GradComm::fp8 : GradComm::bf16;
}

double grad_comm_elem_bytes(GradComm g) {
  switch (g) {
    case GradComm::bf16: return 2;
    case GradComm::fp8: return 1;
    case GradComm::int4: return kInt4BytesPerGradient;
    case GradComm::fp8_int4: return (1 + kInt4BytesPerGradient) / 2;
    case GradComm::automatic:
    case GradComm::fp32: break;
  }
  return 4;
}

size_t grad_comm_scale_bytes(GradComm g) { return scaled_fp8(g) ? sizeof(float) : 0; }

double default_bucket_mb(GradComm g) { return scaled_fp8(g) || g == GradComm::int4 ? 32 : 8; }

}  // namespace convoy
