// Model files: a model's layout and parameter values in one checksummed file.
//
// atoll.save_model() writes one from a PyTorch module: the initial weights of
// a run whose model atoll does not run itself (model.kind = "external",
// atoll/external_model.h). `atoll syncer --save-model PATH` writes the global
// model at the end of a run, which atoll.load_model() puts back into a module.
// The frame is atoll's (runtime/store/framed_record.h, magic "ATOLLMOD"); the record
// is schema/model_file.capnp. Files are written atomically (atoll/file.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "atoll/module_layout.h"
#include "atoll/status.h"

namespace atl {

inline constexpr uint32_t kModelFileFormatVersion = 1;

struct ModelFile {
  std::vector<NamedShape> tensors;  // the module's order
  std::vector<float> values;        // every tensor back to back, row-major
  std::string description;          // for humans
};

std::vector<uint8_t> encode_model_file(const ModelFile& model);

// Checks the frame, then the record: valid tensors (module_layout()'s rules),
// exactly as many values as their shapes hold, every value finite. Errors
// say what is wrong (Corruption).
Result<ModelFile> decode_model_file(std::span<const uint8_t> bytes);

// The same checks before writing (making the file's folder if missing);
// errors name the path.
Status save_model_file(const std::string& path, const ModelFile& model);
Result<ModelFile> load_model_file(const std::string& path);
// Its tensors alone: the frame, checksum, shapes and number of values are
// checked, the values neither copied nor checked. What validating a topology
// needs, without a copy of a large model.
Result<std::vector<NamedShape>> load_model_shapes(const std::string& path);

}  // namespace atl
