// MNIST in its original IDX files (big-endian; LeCun et al.).
//
//   images: u32 magic 0x00000803, u32 count, u32 rows, u32 cols, count*rows*cols u8 pixels
//   labels: u32 magic 0x00000801, u32 count, count u8 labels
//
// The reader checks magic numbers, sizes against the header, equal counts and
// labels < 10; every error names the file and what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "atoll/example_set.h"
#include "atoll/status.h"

namespace atl {

struct ImageSet {
  int count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, image after image, row-major
  std::vector<uint8_t> labels;  // count
};

Result<ImageSet> read_idx(const std::string& images_path, const std::string& labels_path);

struct Mnist {
  ImageSet train;  // 60000
  ImageSet test;   // 10000
};

// Reads dir/{train,t10k}-{images-idx3,labels-idx1}-ubyte.
Result<Mnist> load_mnist(const std::string& dir);

// Pixels scaled to [0, 1], 10 classes.
ExampleSet to_examples(const ImageSet& images);

}  // namespace atl
