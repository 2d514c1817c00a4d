// Fashion-MNIST IDX files -> a tar of PNG files in per-class folders (being written).
