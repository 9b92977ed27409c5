#include "atoll/mnist.h"

#include <cstdio>

#include "atoll/file.h"

namespace atl {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;
constexpr uint32_t kMaxDim = 1u << 16;     // a sanity bound, far above 28
constexpr uint32_t kMaxCount = 1u << 24;

uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
  return uint32_t{b[at]} << 24 | uint32_t{b[at + 1]} << 16 | uint32_t{b[at + 2]} << 8 | b[at + 3];
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

Result<ImageSet> read_idx(const std::string& images_path, const std::string& labels_path) {
  auto images = read_file(images_path);
  if (!images.ok()) return images.status();
  auto labels = read_file(labels_path);
  if (!labels.ok()) return labels.status();
  const auto& ib = *images;
  const auto& lb = *labels;

  if (ib.size() < 16)
    return Status::corruption(images_path + ": " + std::to_string(ib.size()) +
                              " bytes, too short for an IDX image header (16 bytes)");
  if (be32(ib, 0) != kImagesMagic)
    return Status::corruption(images_path + ": magic number " + hex(be32(ib, 0)) + ", expected " +
                              hex(kImagesMagic) + " (IDX unsigned-byte images)");
  const uint32_t count = be32(ib, 4), rows = be32(ib, 8), cols = be32(ib, 12);
  if (count == 0 || count > kMaxCount || rows == 0 || rows > kMaxDim || cols == 0 || cols > kMaxDim)
    return Status::corruption(images_path + ": implausible header: " + std::to_string(count) +
                              " images of " + std::to_string(rows) + "x" + std::to_string(cols));
  const size_t want = 16 + size_t{count} * rows * cols;
  if (ib.size() != want)
    return Status::corruption(images_path + ": " + (ib.size() < want ? "truncated" : "trailing bytes") +
                              ": header says " + std::to_string(count) + " images of " +
                              std::to_string(rows) + "x" + std::to_string(cols) + " (" +
                              std::to_string(want) + " bytes) but the file has " +
                              std::to_string(ib.size()) + " bytes");

  if (lb.size() < 8)
    return Status::corruption(labels_path + ": " + std::to_string(lb.size()) +
                              " bytes, too short for an IDX label header (8 bytes)");
  if (be32(lb, 0) != kLabelsMagic)
    return Status::corruption(labels_path + ": magic number " + hex(be32(lb, 0)) + ", expected " +
                              hex(kLabelsMagic) + " (IDX unsigned-byte labels)");
  if (be32(lb, 4) != count)
    return Status::corruption(labels_path + ": " + std::to_string(be32(lb, 4)) + " labels for " +
                              std::to_string(count) + " images in " + images_path);
  if (lb.size() != 8 + size_t{count})
    return Status::corruption(labels_path + ": " + (lb.size() < 8 + size_t{count} ? "truncated" : "trailing bytes") +
                              ": header says " + std::to_string(count) + " labels (" +
                              std::to_string(8 + size_t{count}) + " bytes) but the file has " +
                              std::to_string(lb.size()) + " bytes");
  for (size_t i = 0; i < count; ++i)
    if (lb[8 + i] > 9)
      return Status::corruption(labels_path + ": label " + std::to_string(i) + " is " +
                                std::to_string(lb[8 + i]) + ", expected a digit 0-9");

  ImageSet set;
  set.count = static_cast<int>(count);
  set.rows = static_cast<int>(rows);
  set.cols = static_cast<int>(cols);
  set.pixels.assign(ib.begin() + 16, ib.end());
  set.labels.assign(lb.begin() + 8, lb.end());
  return set;
}

Result<Mnist> load_mnist(const std::string& dir) {
  auto train = read_idx(dir + "/train-images-idx3-ubyte", dir + "/train-labels-idx1-ubyte");
  if (!train.ok()) return train.status();
  auto test = read_idx(dir + "/t10k-images-idx3-ubyte", dir + "/t10k-labels-idx1-ubyte");
  if (!test.ok()) return test.status();
  if (train->rows != test->rows || train->cols != test->cols)
    return Status::corruption(dir + ": train images are " + std::to_string(train->rows) + "x" +
                              std::to_string(train->cols) + " but test images are " +
                              std::to_string(test->rows) + "x" + std::to_string(test->cols));
  return Mnist{std::move(*train), std::move(*test)};
}

ExampleSet to_examples(const ImageSet& images) {
  ExampleSet set;
  set.features = images.rows * images.cols;
  set.classes = 10;
  set.x.resize(images.pixels.size());
  for (size_t i = 0; i < images.pixels.size(); ++i) set.x[i] = images.pixels[i] * (1.0f / 255.0f);
  set.y.assign(images.labels.begin(), images.labels.end());
  return set;
}

}  // namespace atl
