// Data readers refuse bad files with errors naming the file and the problem;
// shards are disjoint, cover the data and are deterministic in their seed.
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <set>

#include "atoll/data_source.h"
#include "atoll/mnist.h"
#include "atoll/text_corpus.h"
#include "test_support.h"

namespace atl {
namespace {

void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

void write(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> idx_images(uint32_t count, uint32_t rows, uint32_t cols) {
  std::vector<uint8_t> b;
  put_be32(b, 0x803);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint32_t i = 0; i < count * rows * cols; ++i) b.push_back(static_cast<uint8_t>(i * 7));
  return b;
}

std::vector<uint8_t> idx_labels(uint32_t count) {
  std::vector<uint8_t> b;
  put_be32(b, 0x801);
  put_be32(b, count);
  for (uint32_t i = 0; i < count; ++i) b.push_back(static_cast<uint8_t>(i % 10));
  return b;
}

bool mentions(const Status& s, std::string_view text) { return s.message().find(text) != std::string_view::npos; }

struct IdxFiles {
  testing::TempDir dir;
  std::string images = dir.file("images"), labels = dir.file("labels");
  Result<ImageSet> read(const std::vector<uint8_t>& img, const std::vector<uint8_t>& lab) {
    write(images, img);
    write(labels, lab);
    return read_idx(images, labels);
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(data_test)

BOOST_AUTO_TEST_CASE(a_well_formed_idx_pair_is_read) {
  IdxFiles f;
  auto set = f.read(idx_images(5, 3, 2), idx_labels(5));
  BOOST_REQUIRE_MESSAGE(set.ok(), set.status().to_string());
  BOOST_CHECK_EQUAL(set->count, 5);
  BOOST_CHECK_EQUAL(set->rows, 3);
  BOOST_CHECK_EQUAL(set->pixels.size(), 30u);
  BOOST_CHECK_EQUAL(set->pixels[4], 28);
  BOOST_CHECK_EQUAL(set->labels[3], 3);
  const auto ex = to_examples(*set);
  BOOST_CHECK_EQUAL(ex.features, 6);
  BOOST_CHECK_CLOSE(ex.x[4], 28.0f / 255.0f, 1e-5);
}

BOOST_AUTO_TEST_CASE(bad_idx_files_are_refused_with_the_reason) {
  IdxFiles f;
  auto bad_magic = idx_images(5, 3, 2);
  bad_magic[3] = 0x01;
  BOOST_CHECK(mentions(f.read(bad_magic, idx_labels(5)).status(), "magic number 0x00000801, expected 0x00000803"));

  auto truncated = idx_images(5, 3, 2);
  truncated.resize(truncated.size() - 1);
  const Status t = f.read(truncated, idx_labels(5)).status();
  BOOST_CHECK_MESSAGE(mentions(t, "truncated: header says 5 images of 3x2 (46 bytes) but the file has 45 bytes"),
                      t.to_string());
  BOOST_CHECK(mentions(t, f.images));  // names the file

  auto trailing = idx_images(5, 3, 2);
  trailing.push_back(0);
  BOOST_CHECK(mentions(f.read(trailing, idx_labels(5)).status(), "trailing bytes"));

  BOOST_CHECK(mentions(f.read(idx_images(5, 3, 2), idx_labels(4)).status(), "4 labels for 5 images"));

  auto bad_label = idx_labels(5);
  bad_label.back() = 12;
  BOOST_CHECK(mentions(f.read(idx_images(5, 3, 2), bad_label).status(), "label 4 is 12"));

  BOOST_CHECK(mentions(f.read({1, 2, 3}, idx_labels(5)).status(), "too short"));
  BOOST_CHECK(mentions(f.read(idx_images(0, 3, 2), idx_labels(0)).status(), "implausible header"));

  const auto missing = read_idx(f.dir.file("nope"), f.labels);
  BOOST_CHECK(missing.status().code() == Status::Code::kNotFound);
  BOOST_CHECK(mentions(missing.status(), "nope"));
}

BOOST_AUTO_TEST_CASE(text_corpus_holds_out_whole_documents) {
  testing::TempDir dir;
  for (int i = 0; i < 25; ++i) {
    std::string text = "document " + std::to_string(i) + " says hello. ";
    write(dir.file("doc" + std::string(i < 10 ? "0" : "") + std::to_string(i) + ".txt"),
          std::vector<uint8_t>(text.begin(), text.end()));
  }
  write(dir.file("README.md"), {'x'});  // not a document
  auto corpus = read_text_corpus(dir.path(), {".txt", 10});
  BOOST_REQUIRE_MESSAGE(corpus.ok(), corpus.status().to_string());
  BOOST_CHECK_EQUAL(corpus->train.size() + corpus->heldout.size(), 25u);
  BOOST_REQUIRE_EQUAL(corpus->heldout.size(), 2u);  // positions 9 and 19
  BOOST_CHECK_EQUAL(corpus->heldout[0].name, "doc09.txt");
  BOOST_CHECK_EQUAL(corpus->heldout[1].name, "doc19.txt");
  for (const auto& d : corpus->train) BOOST_CHECK(d.name != "doc09.txt" && d.name != "doc19.txt");

  // Shards: every training document in exactly one shard, sizes balanced.
  const auto shards = split_documents(corpus->train, 4, 7);
  size_t total = 0, largest = 0, smallest = SIZE_MAX;
  for (const auto& s : shards) {
    total += s.size();
    largest = std::max(largest, s.size());
    smallest = std::min(smallest, s.size());
  }
  BOOST_CHECK_EQUAL(total, corpus->train_bytes() + corpus->train.size());
  BOOST_CHECK_LE(largest - smallest, 30u);  // at most about one document apart
  const auto train_bytes = concatenate(corpus->train);
  const std::string all(train_bytes.begin(), train_bytes.end());
  BOOST_CHECK(all.find("document 9 ") == std::string::npos);  // held out stays out
  BOOST_CHECK(split_documents(corpus->train, 4, 7) == shards);
  BOOST_CHECK(split_documents(corpus->train, 4, 8) != shards);
}

BOOST_AUTO_TEST_CASE(bad_corpus_folders_are_refused) {
  testing::TempDir dir;
  BOOST_CHECK(mentions(read_text_corpus(dir.file("missing")).status(), "not a folder"));
  BOOST_CHECK(mentions(read_text_corpus(dir.path()).status(), "found 0 '.txt' documents"));
  write(dir.file("a.txt"), {'a'});
  write(dir.file("b.txt"), {});
  BOOST_CHECK(mentions(read_text_corpus(dir.path()).status(), "b.txt: empty document"));
}

BOOST_AUTO_TEST_CASE(index_shards_are_disjoint_cover_and_depend_on_the_seed) {
  const auto shards = split_indices(1003, 4, 11);
  std::set<uint32_t> seen;
  for (const auto& s : shards) {
    BOOST_CHECK(s.size() == 250u || s.size() == 251u);
    for (uint32_t i : s) BOOST_CHECK(seen.insert(i).second);
  }
  BOOST_CHECK_EQUAL(seen.size(), 1003u);
  BOOST_CHECK(split_indices(1003, 4, 11) == shards);
  BOOST_CHECK(split_indices(1003, 4, 12) != shards);
}

BOOST_AUTO_TEST_CASE(streams_are_deterministic_and_stay_in_their_shard) {
  auto set = std::make_shared<ExampleSet>();
  set->features = 1;
  set->classes = 10;
  for (int i = 0; i < 100; ++i) {
    set->x.push_back(float(i));
    set->y.push_back(i % 10);
  }
  const std::vector<uint32_t> shard = {3, 14, 15, 92, 65};
  ExampleStream a(set, shard, 5), b(set, shard, 5);
  std::multiset<float> epoch;
  for (int k = 0; k < 3; ++k) {
    const Batch ba = a.next(5), bb = b.next(5);
    BOOST_CHECK(ba.x == bb.x);
    BOOST_CHECK_EQUAL(ba.tokens, 5);
    if (k == 0) epoch.insert(ba.x.begin(), ba.x.end());
  }
  BOOST_CHECK((epoch == std::multiset<float>{3, 14, 15, 92, 65}));  // one epoch = the shard

  auto bytes = std::make_shared<std::vector<uint8_t>>();
  for (int i = 0; i < 1000; ++i) bytes->push_back(static_cast<uint8_t>(i % 251));
  TextStream ta(bytes, 16, 9), tb(bytes, 16, 9);
  const Batch x = ta.next(8), y = tb.next(8);
  BOOST_CHECK(x.y == y.y);
  BOOST_CHECK_EQUAL(x.y_cols, 17);
  BOOST_CHECK_EQUAL(x.tokens, 8 * 16);
  for (int r = 0; r < 8; ++r)  // windows are contiguous runs of the stream
    for (int k = 1; k <= 16; ++k)
      BOOST_CHECK_EQUAL(x.y[size_t(r * 17 + k)], (x.y[size_t(r * 17 + k - 1)] + 1) % 251);
}

BOOST_AUTO_TEST_CASE(text_eval_windows_predict_every_byte_once) {
  std::vector<uint8_t> bytes(1 + 10 * 8);
  const auto batches = text_batches(bytes, 8, 3);
  size_t windows = 0;
  int64_t tokens = 0;
  for (const auto& b : batches) {
    windows += static_cast<size_t>(b.rows);
    tokens += b.tokens;
  }
  BOOST_CHECK_EQUAL(windows, 10u);
  BOOST_CHECK_EQUAL(tokens, 80);  // every byte after the first
  BOOST_CHECK_EQUAL(text_batches(bytes, 8, 3, 4).size(), 2u);  // capped at 4 windows
}

BOOST_AUTO_TEST_CASE(capped_eval_windows_are_spread_over_the_whole_text) {
  std::vector<uint8_t> bytes(1 + 100 * 8);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i / 8);  // byte = its tile
  const auto batches = text_batches(bytes, 8, 2, 4);
  std::vector<int> first;  // the tile each window starts in
  for (const auto& b : batches)
    for (int r = 0; r < b.rows; ++r) first.push_back(b.y[size_t(r) * size_t(b.y_cols)]);
  BOOST_CHECK((first == std::vector<int>{0, 25, 50, 75}));  // not the first four tiles
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
