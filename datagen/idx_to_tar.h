// Fashion-MNIST IDX files (gzip'ed image and label files) -> an uncompressed tar of PNG files in
// per-class folders, or at its root with a label file (ILSVRC's validation layout), so the embedded
// data set goes through the same tar -> datagen paths as real data.
#pragma once
#include <string>
#include <vector>

namespace convoy::datagen {

// Class names of Fashion-MNIST in label order (folder names, so no spaces or slashes).
const std::vector<std::string>& fashion_mnist_classes();

struct IdxToTarOptions {
  std::string images, labels, out;
  std::string classes_out;  // optional: the class names, one per line, in label order
  // Optional: the images at the tar's root and this file of `name class` lines for datagen --labels.
  std::string flat_labels;
  size_t first = 0;  // only the first N images (0: all)
};

// Writes opt.out atomically; returns the number of images written.
size_t idx_to_tar(const IdxToTarOptions& opt);

}  // namespace convoy::datagen
