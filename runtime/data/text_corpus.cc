#include "atoll/text_corpus.h"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <system_error>

#include "atoll/file.h"
#include "atoll/rng.h"

namespace atl {
namespace {

size_t total_bytes(const std::vector<Document>& docs) {
  size_t n = 0;
  for (const auto& d : docs) n += d.bytes.size();
  return n;
}

}  // namespace

size_t TextCorpus::train_bytes() const { return total_bytes(train); }
size_t TextCorpus::heldout_bytes() const { return total_bytes(heldout); }

Result<TextCorpus> read_text_corpus(const std::string& dir, const TextCorpusOptions& options) {
  namespace fs = std::filesystem;
  if (options.holdout_every < 2)
    return Status::invalid_argument("holdout_every must be at least 2, got " +
                                    std::to_string(options.holdout_every));
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status::not_found(dir + ": not a folder");
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const auto name = entry.path().filename().string();
    if (entry.is_regular_file() && name.ends_with(options.extension)) names.push_back(name);
  }
  if (ec) return Status::io_error(dir + ": cannot list: " + ec.message());
  if (names.size() < 2)
    return Status::not_found(dir + ": found " + std::to_string(names.size()) + " '" +
                             options.extension + "' documents, need at least 2 to hold one out");
  std::sort(names.begin(), names.end());

  TextCorpus corpus;
  for (size_t i = 0; i < names.size(); ++i) {
    auto bytes = read_file(dir + "/" + names[i]);
    if (!bytes.ok()) return bytes.status();
    if (bytes->empty()) return Status::corruption(dir + "/" + names[i] + ": empty document");
    const bool hold = i % static_cast<size_t>(options.holdout_every) ==
                      static_cast<size_t>(options.holdout_every - 1);
    (hold ? corpus.heldout : corpus.train).push_back({names[i], std::move(*bytes)});
  }
  if (corpus.heldout.empty())  // fewer documents than holdout_every
    corpus.heldout.push_back(std::move(corpus.train.back())), corpus.train.pop_back();
  return corpus;
}

std::vector<uint8_t> concatenate(const std::vector<Document>& docs) {
  std::vector<uint8_t> out;
  out.reserve(total_bytes(docs) + docs.size());
  for (const auto& d : docs) {
    out.insert(out.end(), d.bytes.begin(), d.bytes.end());
    out.push_back('\n');
  }
  return out;
}

std::vector<std::vector<uint8_t>> split_documents(const std::vector<Document>& docs, int shards,
                                                  uint64_t seed) {
  std::vector<size_t> order(docs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  Rng rng(seed);
  rng.shuffle(std::span<size_t>(order));
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(shards));
  for (size_t i : order) {
    auto& smallest = *std::min_element(out.begin(), out.end(),
                                       [](const auto& a, const auto& b) { return a.size() < b.size(); });
    smallest.insert(smallest.end(), docs[i].bytes.begin(), docs[i].bytes.end());
    smallest.push_back('\n');
  }
  return out;
}

}  // namespace atl
