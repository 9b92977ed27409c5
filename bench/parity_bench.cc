// Model quality at equal tokens and seed (issue 5): does Decoupled DiLoCo match
// data-parallel training, and what do its choices cost or buy?
//
//   decoupled            4 learners of speeds 1, 1, 0.7, 0.5; K = 1 with grace; int4 pushes
//   dp                   the same learners, synchronous data-parallel
//   K=1 no grace         grace_gamma = 0: a round closes on its first learner
//   8 learners RDA       speeds 1, 1, 0.7, 0.5 twice; the default merge
//   8 learners mean      the same, every fragment by token-weighted mean
//   bf16 pushes / int2   the push codec alone changed
//
//   atoll_parity_bench [TOPOLOGY.toml] [--set key=value]... [--out FILE.json]
// Default: the built-in topology with tokens = 1,500,000 (about 15 minutes on
// 2 cores). A later --set tokens=N wins.
#include "compare.h"

int main(int argc, char** argv) {
  atl::bench::CompareOptions options;
  options.overrides = {"tokens=1500000"};
  options.json_out = "atoll_parity_bench.json";
  const char* usage =
      "Compares held-out quality at equal tokens: decoupled vs dp, grace vs none,\n"
      "RDA vs weighted mean with 8 learners, int4 vs bf16 vs int2 pushes.\n";
  if (int status = atl::bench::parse_compare_args(argc, argv, usage, options); status >= 0) return status;
  const std::string eight =
      "learners=[{speed=1.0,batch_size=8},{speed=1.0,batch_size=8},{speed=0.7,batch_size=8},"
      "{speed=0.5,batch_size=8},{speed=1.0,batch_size=8},{speed=1.0,batch_size=8},"
      "{speed=0.7,batch_size=8},{speed=0.5,batch_size=8}]";
  return atl::bench::compare(options, {
                                          {"decoupled (int4)", {}},
                                          {"dp", {"mode=dp"}},
                                          {"K=1 no grace", {"outer.grace_gamma=0"}},
                                          {"8 learners RDA", {eight}},
                                          {"8 learners mean", {eight, "outer.force_avg=true"}},
                                          {"bf16 pushes", {"outer.push_codec=bf16"}},
                                          {"int2 pushes", {"outer.push_codec=int2"}},
                                      });
}
