// `fusion_bench conv`: plain bf16 convolutions through cuDNN's graph API (dev/cuda/conv_graph.h)
// against conv.cu's ConvPlan (the legacy API), forward and both backward passes, per ResNet-50 shape.
#pragma once

namespace convoy::bench {

// argv after "conv": [net config, default configs/resnet50.toml] [search seconds scale, default 1].
int conv_graph_bench(int argc, char** argv);

}  // namespace convoy::bench
