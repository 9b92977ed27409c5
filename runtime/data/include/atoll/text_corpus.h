// TextCorpus: a folder of text documents (one file each), read as bytes, with
// whole documents held out for evaluation so that no held-out byte was ever
// seen in training, not even as part of a window.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "atoll/status.h"

namespace atl {

struct TextCorpusOptions {
  std::string extension = ".txt";  // only files ending in this are documents
  // Documents in file-name order; each one whose position i satisfies
  // i % holdout_every == holdout_every - 1 is held out (1 in 10 by default).
  int holdout_every = 10;
};

struct Document {
  std::string name;  // file name, without the folder
  std::vector<uint8_t> bytes;
};

struct TextCorpus {
  std::vector<Document> train;
  std::vector<Document> heldout;

  size_t train_bytes() const;
  size_t heldout_bytes() const;
};

// Fails if `dir` is missing, holds no document, a document is unreadable or
// empty, or fewer than two documents leave nothing to hold out.
Result<TextCorpus> read_text_corpus(const std::string& dir, const TextCorpusOptions& options = {});

// The documents back to back, each followed by a '\n'.
std::vector<uint8_t> concatenate(const std::vector<Document>& docs);

// Splits documents into `shards` byte streams of near-equal size: documents
// in a seeded random order, each appended (with its '\n') to the currently
// smallest shard. Every document lands in exactly one shard.
// REQUIRES: shards >= 1.
std::vector<std::vector<uint8_t>> split_documents(const std::vector<Document>& docs, int shards,
                                                  uint64_t seed);

}  // namespace atl
