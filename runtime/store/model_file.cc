#include "atoll/model_file.h"

#include <capnp/serialize.h>
#include <kj/exception.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "atoll/file.h"
#include "atoll/model_file.capnp.h"
#include "framed_record.h"

namespace atl {
namespace {

constexpr FileMagic kMagic = {'A', 'T', 'O', 'L', 'L', 'M', 'O', 'D'};
constexpr size_t kMaxDescriptionBytes = 4096;

// What decode and save both check: the shapes make a layout, and `values`
// values fill it.
Status check_shapes(const std::vector<NamedShape>& tensors, size_t values, const std::string& description) {
  auto layout = module_layout(tensors, {});
  if (!layout.ok()) return layout.status();
  if (tensors.empty()) return Status::invalid_argument("the model has no tensors");
  if (values != layout->size())
    return Status::invalid_argument("the tensors hold " + std::to_string(layout->size()) + " values, the file has " +
                                    std::to_string(values));
  if (description.size() > kMaxDescriptionBytes)
    return Status::invalid_argument("the description has more than " + std::to_string(kMaxDescriptionBytes) + " bytes");
  return {};
}

// And every value finite.
Status check(const ModelFile& m) {
  ATOLL_RETURN_IF_ERROR(check_shapes(m.tensors, m.values.size(), m.description));
  if (auto bad = std::find_if(m.values.begin(), m.values.end(), [](float x) { return !std::isfinite(x); });
      bad != m.values.end()) {
    const size_t at = static_cast<size_t>(bad - m.values.begin());
    for (const auto& t : module_layout(m.tensors, {})->tensors())
      if (at >= t.offset && at < t.offset + t.size())
        return Status::invalid_argument("tensor " + t.name + " value " + std::to_string(at - t.offset) +
                                        " is not finite");
  }
  return {};
}

// The record in `bytes`, its values copied out only `with_values` (its
// shapes alone need none); checked as far as it was read.
Result<ModelFile> decode(std::span<const uint8_t> bytes, bool with_values) {
  std::vector<capnp::word> aligned;
  auto words = unframe_record(bytes, kMagic, kModelFileFormatVersion, "an atoll model file", aligned);
  if (!words.ok()) return words.status();
  ModelFile m;
  size_t values = 0;
  try {
    capnp::FlatArrayMessageReader reader(*words, record_reader_options(words->size()));
    const auto root = reader.getRoot<schema::ModelFile>();
    if (root.getFormatVersion() != kModelFileFormatVersion)
      return Status::corruption("record format version " + std::to_string(root.getFormatVersion()));
    for (auto t : root.getTensors()) {
      NamedShape s;
      s.name = t.getName().cStr();
      for (int64_t d : t.getDims()) s.dims.push_back(d);
      m.tensors.push_back(std::move(s));
    }
    const auto data = root.getValues();  // once: each get counts against the traversal limit
    if (data.size() % sizeof(float) != 0)
      return Status::corruption("the values have " + std::to_string(data.size()) +
                                " bytes, not a whole number of floats");
    values = data.size() / sizeof(float);
    if (with_values) m.values = floats_of(data, "the values");
    m.description = root.getDescription().cStr();
  } catch (const kj::Exception& e) {
    return Status::corruption(std::string("malformed record: ") + e.getDescription().cStr());
  } catch (const std::runtime_error& e) {
    return Status::corruption(e.what());
  }
  Status s = with_values ? check(m) : check_shapes(m.tensors, values, m.description);
  if (!s.ok()) return Status::corruption(std::string(s.message()));
  return m;
}

}  // namespace

std::vector<uint8_t> encode_model_file(const ModelFile& m) {
  capnp::MallocMessageBuilder builder;
  auto root = builder.initRoot<schema::ModelFile>();
  root.setFormatVersion(kModelFileFormatVersion);
  auto ts = root.initTensors(static_cast<unsigned>(m.tensors.size()));
  for (unsigned i = 0; i < ts.size(); ++i) {
    ts[i].setName(m.tensors[i].name);
    auto dims = ts[i].initDims(static_cast<unsigned>(m.tensors[i].dims.size()));
    for (unsigned d = 0; d < dims.size(); ++d) dims.set(d, m.tensors[i].dims[d]);
  }
  root.setValues(float_bytes(m.values));
  root.setDescription(m.description);
  return frame_record(kMagic, kModelFileFormatVersion, builder);
}

Result<ModelFile> decode_model_file(std::span<const uint8_t> bytes) { return decode(bytes, true); }

Status save_model_file(const std::string& path, const ModelFile& model) {
  ATOLL_RETURN_IF_ERROR(check(model).with_context(path + ": not written"));
  if (const auto folder = std::filesystem::path(path).parent_path(); !folder.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    if (ec) return Status::io_error(path + ": cannot create its folder: " + ec.message());
  }
  const auto bytes = encode_model_file(model);
  return write_file_atomic(path, bytes);
}

Result<ModelFile> load_model_file(const std::string& path) {
  auto bytes = read_file(path);
  if (!bytes.ok()) return bytes.status();
  auto m = decode(*bytes, true);
  if (!m.ok()) return m.status().with_context(path);
  return m;
}

Result<std::vector<NamedShape>> load_model_shapes(const std::string& path) {
  auto bytes = read_file(path);
  if (!bytes.ok()) return bytes.status();
  auto m = decode(*bytes, false);
  if (!m.ok()) return m.status().with_context(path);
  return std::move(m->tensors);
}

}  // namespace atl
