// cuDNN's own log of why it refuses a graph, switched on by CONVOY_CUDNN_LOG for the tools that probe
// fused plans (gpu_test_fusion, fusion_bench): cuDNN's reasons are richer than its status codes.
#pragma once

namespace convoy::gpu {

// Where CONVOY_CUDNN_LOG is set (and not "0") and CUDNN_LOGLEVEL_DBG is not, sets
// CUDNN_LOGLEVEL_DBG=2 (errors and warnings, where the refusals are) and CUDNN_LOGDEST_DBG=stderr, and
// runs the program again with the same arguments, so that cuDNN, loaded before main, sees them from
// its start. Where cuDNN's log is on, stdout is made line-buffered so that the program's lines and
// cuDNN's stay in order in one file. Returns whether cuDNN's log is on. Call it before any cuDNN call.
bool cudnn_log_from_env();

}  // namespace convoy::gpu
