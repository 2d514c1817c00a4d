// Progressive resizing as FFCV's ImageNet recipes use it: the side of the training crops grows by
// epoch (160 -> 192 px, say) while evaluation stays at the net's input size.
#pragma once
#include <string>
#include <vector>

namespace convoy {

// The training crop's side by epoch. Epochs count from 0, as FFCV's configs count them, so their
// start_ramp and end_ramp carry over unchanged (the log's "epoch 1" is epoch 0 here).
struct ProgressiveResize {
  int min_res = 0, max_res = 0;      // sides in pixels; max_res 0: off
  int start_ramp = 0, end_ramp = 0;  // the epochs the ramp starts and ends at
  bool on() const { return max_res > 0; }
};

// The ramp's sizes are multiples of this (FFCV's 32).
constexpr int kProgressiveStep = 32;
constexpr int kMaxRampEpoch = 100000;  // train's largest epoch count (net_config.h kMaxEpochs)

// FFCV's get_resolution (ffcv-imagenet, train_imagenet.py): min_res up to start_ramp, max_res from
// end_ramp on, and between them the linear interpolation from (start_ramp, min_res) to
// (end_ramp, max_res) rounded to the nearest multiple of 32, halves to even (int(np.round(x / 32))
// * 32; numpy rounds halves to even, not down and not up).
int resolution_at(const ProgressiveResize& p, int epoch);
// Every side resolution_at can give, whatever the epoch, smallest first: min_res, the multiples of
// 32 between, max_res.
std::vector<int> resolutions(const ProgressiveResize& p);
// An epoch of the first `epochs` whose side is the largest of them (the sides never shrink from
// one epoch to the next).
int largest_epoch(const ProgressiveResize& p, int epochs);

// "" if `p` means something for training crops of a net whose input side is `crop` that are made
// by random_resized_crop (the only crop that resizes to each epoch's side), else its first problem
// in one line, naming the key.
std::string progressive_problem(const ProgressiveResize& p, int crop, bool random_resized_crop);

}  // namespace convoy
