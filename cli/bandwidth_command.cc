#include "bandwidth_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "atoll/bandwidth_model.h"
#include "atoll/job.h"
#include "atoll/link_advice.h"
#include "atoll/topology_file.h"
#include "command.h"

namespace atl::cli {
namespace {

// `--link`: the protocol simulated on the user's link with the topology's
// settings and the alternatives atoll/link_advice.h lists.
int advise(const BandwidthArgs& a, const Topology& t, double parameters, int tensors, int learners) {
  auto link = parse_link_shape(a.link);
  if (!link.ok()) {
    std::fprintf(stderr, "atoll: --link: %s\n", link.status().to_string().c_str());
    return 2;
  }
  if (t.mode != Mode::kDecoupled) {
    std::fprintf(stderr, "atoll: --link advises decoupled settings; the topology's mode is %s\n", mode_name(t.mode));
    return 2;
  }
  LinkQuestion q;
  q.parameters = parameters;
  q.step_seconds = a.step_seconds;
  q.learners = learners;
  q.tensors = tensors;
  q.outer = t.outer;
  q.link = *link;
  q.target = a.target;
  auto advice = advise_link(q);
  if (!advice.ok()) {
    std::fprintf(stderr, "atoll: --link: %s\n", advice.status().to_string().c_str());
    return 2;
  }
  std::printf("\nOn %s, %d learners, simulated (a broadcast later than its deadline counts as waiting):\n\n",
              link->to_string().c_str(), learners);
  std::printf("  %-24s %12s %14s   %s\n", "option", "utilization", "needs", "settings");
  for (size_t i = 0; i < advice->options.size(); ++i) {
    const LinkOption& o = advice->options[i];
    std::string sets;
    for (const auto& s : o.sets) sets += (sets.empty() ? "" : " ") + std::string("--set ") + s;
    const std::string needs = o.needs_bits_per_second ? human_bits(*o.needs_bits_per_second) : "more than 100x";
    std::printf("%s %-24s %11.1f%% %14s   %s\n", static_cast<int>(i) == advice->chosen ? "*" : " ", o.name.c_str(),
                100 * o.utilization, needs.c_str(), sets.empty() ? "(none)" : sets.c_str());
  }
  std::printf("\nMeasured quality cost (bits per byte at equal tokens, CPU headline, docs/benchmarks.md):\n");
  for (const auto& o : advice->options) std::printf("  %-24s %s\n", o.name.c_str(), o.quality.c_str());
  if (!advice->note.empty()) std::printf("(%s)\n", advice->note.c_str());
  if (advice->chosen >= 0)
    std::printf("\n* %s keeps %.0f%% of compute busy on this link.\n",
                advice->options[static_cast<size_t>(advice->chosen)].name.c_str(), 100 * a.target);
  else
    std::printf("\nNone of these keeps %.0f%% on this link: a faster link, a longer step (larger batches), or fewer "
                "bits (outer.push_codec=int2) would.\n", 100 * a.target);
  return 0;
}

}  // namespace

int bandwidth_command(const BandwidthArgs& a) {
  auto topology = load_topology(a.file, a.sets);
  if (!topology.ok()) {
    std::fprintf(stderr, "atoll: %s\n", topology.status().to_string().c_str());
    return 2;
  }
  const Topology& t = *topology;
  std::string model = "a model of the given size";
  double n = a.parameters;
  int tensors = 0;
  if (n <= 0) {
    auto m = make_model(t);
    if (!m.ok()) {
      std::fprintf(stderr, "atoll: %s\n", m.status().to_string().c_str());
      return 2;
    }
    n = static_cast<double>((*m)->layout().size());
    tensors = (*m)->layout().count();
    model = (*m)->describe();
  }
  BandwidthInputs in;
  in.parameters = n;
  in.step_seconds = a.step_seconds;
  in.rtt_seconds = a.rtt_ms / 1000;
  in.target = a.target;
  in.sync_every = t.outer.sync_every;
  in.fragments = t.outer.fragments;
  in.overlap = t.outer.overlap;
  in.push_codec = t.outer.push_codec;
  in.push_block = t.outer.push_block;
  in.broadcast_codec = t.outer.broadcast_codec;
  in.broadcast_block = t.outer.broadcast_block;
  const BandwidthNeed need = bandwidth_need(in);
  const int m = a.learners > 0 ? a.learners : static_cast<int>(t.learners.size());
  const int shards = a.shards > 0 ? a.shards : t.syncer.shards;
  std::printf("%s: %.4g parameters; %d learners; H = %d, P = %d, tau = %d; pushes %s, broadcasts %s; %d syncer shard%s\n",
              model.c_str(), n, m, in.sync_every, in.fragments, in.overlap, codec_name(in.push_codec),
              codec_name(in.broadcast_codec), shards, shards == 1 ? "" : "s");
  std::printf("%.3g s of compute per step, round trip %.3g ms, to keep %.0f%% of compute busy:\n\n", in.step_seconds,
              a.rtt_ms, 100 * in.target);
  std::printf("%-24s %18s %22s %18s\n", "", "per learner link", "at each syncer shard", "bytes per step");
  auto row = [&](const char* name, double bits, double bytes) {
    std::printf("%-24s %18s %22s %15.4g MB\n", name, human_bits(bits).c_str(), human_bits(hub_need(bits, m, shards)).c_str(),
                bytes / 1e6);
  };
  row("dp", need.dp, need.dp_bytes_per_step);
  row("decoupled", need.decoupled, need.decoupled_bytes_per_step);
  row("decoupled, on time", need.decoupled_on_time, need.decoupled_bytes_per_step);
  std::printf("%-24s %18s %22s\n", "average rate, dp", human_bits(need.dp_average).c_str(),
              human_bits(hub_need(need.dp_average, m, shards)).c_str());
  std::printf("%-24s %18s %22s   (%.0f times less)\n", "average rate, decoupled", human_bits(need.decoupled_average).c_str(),
              human_bits(hub_need(need.decoupled_average, m, shards)).c_str(), need.dp_average / need.decoupled_average);
  if (std::isfinite(need.dp) && std::isfinite(need.decoupled) && need.decoupled > 0)
    std::printf("\ndp needs %.0f times the bandwidth of decoupled.\n", need.dp / std::max(need.decoupled, need.decoupled_on_time));
  else if (!std::isfinite(need.dp))
    std::printf("\ndp cannot keep %.0f%% at any bandwidth: the round trip alone takes more than the step allows.\n",
                100 * in.target);
  // The hub: how many shards keep each syncer link within a.hub_gbit.
  const double hub_bits = a.hub_gbit * 1e9;
  const double decoupled_need = std::max(need.decoupled, need.decoupled_on_time);
  auto shards_text = [&](double learner_bits) -> std::string {
    const int s = shards_needed(learner_bits, m, hub_bits, in.fragments);
    if (s == 0) return "none suffices";
    if (hub_need(learner_bits, m, s) > hub_bits) return "more than the " + std::to_string(in.fragments) + " fragments allow";
    return std::to_string(s) + " shard" + (s == 1 ? "" : "s");
  };
  std::printf("\nOn %s links at the syncer: decoupled needs %s, dp %s.\n", human_bits(hub_bits).c_str(),
              shards_text(decoupled_need).c_str(), shards_text(need.dp).c_str());
  if (!a.links_mbit.empty()) {
    std::printf("\n%-16s %10s %10s\n", "link", "dp", "decoupled");
    for (double mbit : a.links_mbit)
      std::printf("%-16s %9.1f%% %9.1f%%\n", human_bits(mbit * 1e6).c_str(), 100 * dp_utilization(in, mbit * 1e6),
                  100 * decoupled_utilization(in, mbit * 1e6));
  }
  if (!a.link.empty()) return advise(a, t, n, tensors, m);
  return 0;
}

void add_bandwidth_command(CLI::App& app, int& status) {
  auto bw = std::make_shared<BandwidthArgs>();
  auto* bandwidth = app.add_subcommand(
      "bandwidth", "The link bandwidth each mode needs to keep its compute busy (a model; docs/benchmarks.md, \"Over a slow link\")");
  bandwidth->add_option("file", bw->file, "Topology file (TOML); none: the built-in default");
  add_set_option(bandwidth, bw->sets);
  bandwidth->add_option("--step-seconds", bw->step_seconds, "Compute time of one inner step of one learner")
      ->capture_default_str()
      ->check(kPositiveSeconds);
  bandwidth->add_option("--rtt-ms", bw->rtt_ms, "Round trip between a learner and the syncer")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  bandwidth->add_option("--target", bw->target, "Share of compute to keep busy")->capture_default_str()->check(CLI::Range(0.01, 0.999));
  bandwidth->add_option("--parameters", bw->parameters, "Model size, instead of the topology model's (e.g. 1e10)")
      ->check(CLI::Range(1.0, 1e15));
  bandwidth->add_option("--learners", bw->learners, "Number of learners, instead of the topology's [[learners]]")
      ->check(CLI::Range(1, 10000000));
  bandwidth->add_option("--shards", bw->shards, "Syncer shards, instead of the topology's syncer.shards")
      ->check(CLI::Range(1, 100000));
  bandwidth->add_option("--hub-gbit", bw->hub_gbit, "Each syncer shard's link, for the shards needed")
      ->capture_default_str()
      ->check(CLI::Range(1e-6, 1e6));
  bandwidth->add_option("--link", bw->link,
                        "Your learners' link (e.g. rate=1gbit,delay=20ms): simulate atoll on it with the topology's "
                        "settings and the alternatives (streamed fragments, eager updates, H x 2), and mark the first "
                        "that keeps --target");
  bandwidth->add_option("--link-mbit", bw->links_mbit, "Also print each mode's utilization at these bandwidths (repeatable)")
      ->check(CLI::Range(1e-3, 1e9));
  bandwidth->footer(
      "\nPer learner link: dp sends its fp32 gradient and waits for fp32 parameters every step (transfer and\n"
      "round trip on the critical path); decoupled pushes and receives each fragment once per H steps while\n"
      "it trains on. Each syncer shard's link carries its share of every learner's traffic (M / S times a\n"
      "learner's), which sets how many shards a hub link allows. Formulas: atoll/bandwidth_model.h.\n"
      "Examples:\n"
      "  atoll bandwidth --step-seconds 0.23 --rtt-ms 40 --link-mbit 100 --link-mbit 1000\n"
      "  atoll bandwidth --parameters 1e10 --step-seconds 2 --rtt-ms 100 --set outer.sync_every=100\n"
      "  atoll bandwidth --parameters 1e9 --learners 8 --step-seconds 1 --hub-gbit 10\n"
      "  atoll bandwidth --parameters 1e11 --step-seconds 4.9 --set outer.sync_every=100 --set outer.fragments=36 \\\n"
      "      --target 0.99 --link rate=1.5gbit,delay=20ms");
  bandwidth->callback([bw, &status] { status = bandwidth_command(*bw); });
}

}  // namespace atl::cli
