// Writes the seed corpora of the binary fuzz targets (message, payload,
// checkpoint): one valid input of every kind, small. The text targets take
// their seeds from examples/. Run by hand when a format changes:
//   build-fuzz/tests/fuzz/make_fuzz_seeds tests/fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "atoll/checkpoint.h"
#include "atoll/messages.h"
#include "atoll/syncer_figures.h"

namespace {

void put(const std::filesystem::path& file, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds CORPUS_DIR\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  using namespace atl;
  const std::vector<float> values = {0.5f, -1.25f, 3.0f, 0.0f, 1e-3f, -7.5f, 2.0f, 0.125f, 9.0f};
  const Payload fp32 = encode_payload(Codec::kFp32, 0, values);
  const Payload int4 = encode_payload(Codec::kInt4, 8, values);
  Topology topology;
  topology.learners = {{1.0, 8}, {0.5, 8}};
  const std::vector<Message> messages = {
      Register{1, 2, 0xfeed, "proof", {{0, 3, fp32}}, 77},
      Welcome{1, 2, topology, {{0, 3, fp32}, {1, 0, Payload{}}}, OptimizerState{5, fp32, fp32}, {}},
      Pull{1, 9, true},
      Push{1, 2, 0, 9, 3, 12, 768, 1.5, int4},
      Broadcast{0, 4, int4, true, 3, {0, 1}},
      Progress{1, 2, 40, 2560, 0.05, {{3, 12}, {2, 7}}, 2.5f},
      Reject{RejectReason::kStale, 0, "base version 2 is older than 4 - 1"},
      MomentsPull{6},
      Moments{6, OptimizerState{5, encode_payload(Codec::kBf16, 0, values), encode_payload(Codec::kBf16, 0, values)}},
      Done{"token budget reached"},
      Challenge{std::string(32, 'n')},
      Hello{1, Purpose::kJoin, std::string(32, 'p'), 0x1234},
      Evaluation{1, 2, {3, 3}, 1.5, 2.16, 0.5, 4096},
      Leave{1, 2, "SIGTERM"},
  };
  for (const auto& m : messages) put(dir / "message" / message_name(m), encode_message(m));

  int n = 0;
  for (Codec c : {Codec::kFp32, Codec::kBf16, Codec::kInt8, Codec::kInt4, Codec::kInt2}) {
    const Payload p = encode_payload(c, is_quantized(c) ? 8 : 0, values);
    std::vector<uint8_t> input = {static_cast<uint8_t>(p.codec)};
    for (int k = 0; k < 4; ++k) input.push_back(static_cast<uint8_t>(p.block >> (8 * k)));
    for (int k = 0; k < 2; ++k) input.push_back(static_cast<uint8_t>(p.count >> (8 * k)));
    input.insert(input.end(), p.bytes.begin(), p.bytes.end());
    put(dir / "payload" / codec_name(c), input);
    ++n;
  }

  CheckpointState s;
  s.fingerprint = 0xfeed;
  s.created_unix_ms = 1700000000000;
  s.rounds = 12;
  s.fragments = {{0, 4, values, values}, {1, 3, {1.0f, 2.0f}, {0.0f, 0.0f}}};
  s.learners = {{0, 1, 0, 0, 12, 768}, {1, 3, 40, 2560, 7, 448}};
  SyncerFigures figures;
  figures.started_unix_ms = 1700000000000;
  figures.seconds = 9.5;
  figures.tokens = 3776;
  figures.stats.rounds = 12;
  figures.stats.merged_pushes = 20;
  figures.stats.round_ends = {{1.0, 0}, {1.5, 1}};
  figures.stats.evaluations.push_back({5.0, 1000, 0, 2, 4, 1.5, 0.0, 0.5, 64, false});
  figures.learners.resize(2);
  figures.learners[1].merged = 9;
  s.figures = encode_figures(figures);
  put(dir / "checkpoint" / "two-fragments", encode_checkpoint(s));
  std::printf("seeds written to %s: %zu messages, %d payloads, 1 checkpoint\n", dir.c_str(), messages.size(), n);
  return 0;
}
