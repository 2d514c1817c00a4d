// --gpu-resize's choice, image by image, between the thread's own CPU resize and the GPU: the
// cheaper one for this thread by costs measured during the run.
#pragma once
#include <cstdint>

namespace convoy::datagen {

// The GPU costs a thread only its host side (copying into pinned memory when the codec could not
// decode straight into it, and waiting for the batch); the CPU resize costs its own time, which
// grows with the decoded image's pixels. Whether the GPU pays depends on the image size, on how
// many threads and ranks share the GPU and on what else the machine does, so both costs are
// measured as the run goes (exponential averages) and every image goes where it is cheaper. So
// that neither estimate goes stale, a path left unused for kExplore images gets the next one.
class ResizeRouter {
 public:
  static constexpr int kExplore = 32;

  // True: resize this image (of `pixels` decoded pixels) on the GPU; false: on the CPU. With
  // always, true without asking (but counted).
  bool gpu(double pixels, bool always = false);
  void note_cpu(double pixels, double seconds);
  // A GPU batch of `images` images cost the thread `seconds` in all.
  void note_gpu(int images, double seconds);

  double cpu_seconds_per_pixel() const { return cpu_s_per_px_; }  // < 0 until measured
  double gpu_seconds_per_image() const { return gpu_s_per_image_; }
  uint64_t gpu_images() const { return gpu_images_; }
  uint64_t cpu_images() const { return cpu_images_; }

 private:
  double cpu_s_per_px_ = -1, gpu_s_per_image_ = -1;
  int since_cpu_ = 0, since_gpu_ = 0;
  uint64_t gpu_images_ = 0, cpu_images_ = 0;
};

}  // namespace convoy::datagen
