#include "atoll/syncer_figures.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cmath>
#include <cstring>
#include <string>

#include "atoll/checkpoint.capnp.h"

namespace atl {
namespace {

// Figures a syncer can have written: times and sums finite and not negative,
// a start within wall-clock reach (so that differences of starts cannot
// overflow). Names the first that is not.
Status check(const SyncerFigures& f) {
  constexpr int64_t kLatestStartMs = int64_t{10'000'000'000'000};  // the year 2286
  if (f.started_unix_ms < 0 || f.started_unix_ms > kLatestStartMs)
    return Status::corruption("the syncer's figures say the run started at " + std::to_string(f.started_unix_ms) +
                              " ms since 1970");
  const SyncerStats& s = f.stats;
  const std::pair<const char*, double> amounts[] = {
      {"seconds", f.seconds},
      {"allocated seconds", f.allocated_seconds},
      {"CPU seconds", f.cpu_seconds},
      {"quorum sum", s.quorum_sum},
      {"grace wait sum", s.grace_wait_sum},
      {"round seconds sum", s.round_seconds_sum},
      {"adopted seconds sum", s.adopted_seconds_sum},
      {"adopted seconds max", s.adopted_seconds_max},
      {"good seconds", s.good_seconds},
  };
  for (const auto& [name, x] : amounts)
    if (!std::isfinite(x) || x < 0)
      return Status::corruption("the syncer's figures hold " + std::string(name) + " " + std::to_string(x));
  for (double x : {s.first_welcome, s.final_seconds})  // -1: not yet
    if (!std::isfinite(x) || (x < 0 && x != -1.0))
      return Status::corruption("the syncer's figures hold a time of " + std::to_string(x) + " s");
  for (const RoundEnd& e : s.round_ends)
    if (!std::isfinite(e.seconds)) return Status::corruption("the syncer's figures hold a round end that is not finite");
  for (const LearnerRecord& l : f.learners)
    if (!std::isfinite(l.member_since) || !std::isfinite(l.member_seconds) || l.member_seconds < 0)
      return Status::corruption("the syncer's figures hold a learner's membership time that is not finite");
  return {};
}

}  // namespace

std::vector<uint8_t> encode_figures(const SyncerFigures& f) {
  capnp::MallocMessageBuilder builder;
  auto r = builder.initRoot<schema::SyncerFigures>();
  const SyncerStats& s = f.stats;
  r.setStartedUnixMs(f.started_unix_ms);
  r.setSeconds(f.seconds);
  r.setTokens(f.tokens);
  r.setAllocatedSeconds(f.allocated_seconds);
  r.setCpuSeconds(f.cpu_seconds);
  auto counts = r.initCounts(static_cast<unsigned>(kSyncerCountNumber));
  for (unsigned i = 0; i < kSyncerCountNumber; ++i) {
    counts[i].setName(kSyncerCounts[i].name);
    counts[i].setValue(s.*kSyncerCounts[i].field);
  }
  r.setRounds(s.rounds);
  r.setRejected(s.rejected);
  r.setQuorumSum(s.quorum_sum);
  r.setGraceWaitSum(s.grace_wait_sum);
  r.setRoundSecondsSum(s.round_seconds_sum);
  r.setAdoptedBroadcasts(s.adopted_broadcasts);
  r.setAdoptedSecondsSum(s.adopted_seconds_sum);
  r.setAdoptedSecondsMax(s.adopted_seconds_max);
  r.setGoodSeconds(s.good_seconds);
  r.setFirstWelcome(s.first_welcome);
  r.setFinalSeconds(s.final_seconds);
  r.setBytesReceived(s.bytes_received);
  r.setBytesSent(s.bytes_sent);
  auto ends = r.initRoundEnds(static_cast<unsigned>(s.round_ends.size()));
  for (unsigned i = 0; i < ends.size(); ++i) {
    ends[i].setSeconds(s.round_ends[i].seconds);
    ends[i].setFragment(s.round_ends[i].fragment);
  }
  auto recoveries = r.initRecoverySeconds(static_cast<unsigned>(s.recovery_seconds.size()));
  for (unsigned i = 0; i < recoveries.size(); ++i) recoveries.set(i, s.recovery_seconds[i]);
  auto evals = r.initEvaluations(static_cast<unsigned>(s.evaluations.size()));
  for (unsigned i = 0; i < evals.size(); ++i) {
    const EvaluationPoint& e = s.evaluations[i];
    evals[i].setSeconds(e.seconds);
    evals[i].setTokens(e.tokens);
    evals[i].setLearner(e.learner);
    evals[i].setVersionsMin(e.versions_min);
    evals[i].setVersionsSum(e.versions_sum);
    evals[i].setLoss(e.loss);
    evals[i].setBitsPerByte(e.bits_per_byte);
    evals[i].setAccuracy(e.accuracy);
    evals[i].setCount(e.count);
    evals[i].setFinal(e.final);
  }
  auto ls = r.initLearners(static_cast<unsigned>(f.learners.size()));
  for (unsigned i = 0; i < ls.size(); ++i) {
    const LearnerRecord& l = f.learners[i];
    ls[i].setConnected(l.connected);
    ls[i].setIncarnation(l.incarnation);
    ls[i].setRegistrations(l.registrations);
    ls[i].setSteps(l.steps);
    ls[i].setTokens(l.tokens);
    ls[i].setPastSteps(l.past_steps);
    ls[i].setPastTokens(l.past_tokens);
    ls[i].setStepSeconds(l.step_seconds);
    ls[i].setLoss(l.loss);
    ls[i].setFailures(l.failures);
    ls[i].setMerged(l.merged);
    ls[i].setSpeed(l.speed);
    ls[i].setBatchSize(l.batch_size);
    ls[i].setMember(l.member);
    ls[i].setQualified(l.qualified);
    ls[i].setMemberSeconds(l.member_seconds);
    ls[i].setMemberSince(l.member_since);
    ls[i].setDepartures(l.departures);
  }
  const auto words = capnp::messageToFlatArray(builder);
  const auto bytes = words.asBytes();
  return {bytes.begin(), bytes.end()};
}

Result<SyncerFigures> decode_figures(std::span<const uint8_t> bytes) {
  if (bytes.size() % sizeof(capnp::word) != 0)
    return Status::corruption("the syncer's figures are " + std::to_string(bytes.size()) +
                              " bytes, not whole 8-byte words");
  std::vector<capnp::word> aligned(bytes.size() / sizeof(capnp::word));
  if (!bytes.empty()) std::memcpy(aligned.data(), bytes.data(), bytes.size());
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = 2 * aligned.size() + 1024;
    capnp::FlatArrayMessageReader reader(kj::arrayPtr(aligned.data(), aligned.size()), options);
    const auto r = reader.getRoot<schema::SyncerFigures>();
    SyncerFigures f;
    SyncerStats& s = f.stats;
    f.started_unix_ms = r.getStartedUnixMs();
    f.seconds = r.getSeconds();
    f.tokens = r.getTokens();
    f.allocated_seconds = r.getAllocatedSeconds();
    f.cpu_seconds = r.getCpuSeconds();
    for (auto c : r.getCounts()) {
      const size_t i = SyncerCountValues::index(c.getName().cStr());
      if (i < kSyncerCountNumber) s.*kSyncerCounts[i].field = c.getValue();
    }
    s.rounds = r.getRounds();
    s.rejected = r.getRejected();
    s.quorum_sum = r.getQuorumSum();
    s.grace_wait_sum = r.getGraceWaitSum();
    s.round_seconds_sum = r.getRoundSecondsSum();
    s.adopted_broadcasts = r.getAdoptedBroadcasts();
    s.adopted_seconds_sum = r.getAdoptedSecondsSum();
    s.adopted_seconds_max = r.getAdoptedSecondsMax();
    s.good_seconds = r.getGoodSeconds();
    s.first_welcome = r.getFirstWelcome();
    s.final_seconds = r.getFinalSeconds();
    s.bytes_received = r.getBytesReceived();
    s.bytes_sent = r.getBytesSent();
    for (auto e : r.getRoundEnds()) s.round_ends.push_back({e.getSeconds(), e.getFragment()});
    for (double x : r.getRecoverySeconds()) s.recovery_seconds.push_back(x);
    for (auto e : r.getEvaluations())
      s.evaluations.push_back({e.getSeconds(), e.getTokens(), e.getLearner(), e.getVersionsMin(), e.getVersionsSum(),
                               e.getLoss(), e.getBitsPerByte(), e.getAccuracy(), e.getCount(), e.getFinal()});
    for (auto x : r.getLearners()) {
      LearnerRecord l;
      l.connected = x.getConnected();
      l.incarnation = x.getIncarnation();
      l.registrations = x.getRegistrations();
      l.steps = x.getSteps();
      l.tokens = x.getTokens();
      l.past_steps = x.getPastSteps();
      l.past_tokens = x.getPastTokens();
      l.step_seconds = x.getStepSeconds();
      l.loss = x.getLoss();
      l.failures = x.getFailures();
      l.merged = x.getMerged();
      l.speed = x.getSpeed();
      l.batch_size = x.getBatchSize();
      l.member = x.getMember();
      l.qualified = x.getQualified();
      l.member_seconds = x.getMemberSeconds();
      l.member_since = x.getMemberSince();
      l.departures = x.getDepartures();
      f.learners.push_back(std::move(l));
    }
    ATOLL_RETURN_IF_ERROR(check(f));
    return f;
  } catch (const kj::Exception& e) {
    return Status::corruption(std::string("the syncer's figures do not decode: ") + e.getDescription().cStr());
  }
}

}  // namespace atl
