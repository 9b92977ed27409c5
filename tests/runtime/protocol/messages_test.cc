// Protocol messages: each one survives encode/decode unchanged, and nothing a
// peer can send (truncated, padded, garbled, oversized, out-of-range enums,
// an invalid topology) gets past decode_message() as anything but an error.
#include <boost/test/unit_test.hpp>

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cmath>
#include <limits>

#include "atoll/crc32c.h"
#include "atoll/messages.h"
#include "atoll/wire.capnp.h"
#include "test_support.h"

namespace atl {
namespace {

Payload some_payload(Codec codec, size_t n, uint64_t seed) {
  return encode_payload(codec, 32, testing::random_vector(n, seed));
}

Topology unusual_topology() {
  Topology t;
  t.mode = Mode::kElasticDp;
  t.seed = 0xdeadbeefcafeULL;
  t.tokens = 123456789;
  t.seconds = 42.5;
  t.learners = {{1.0, 32}, {0.25, 128}, {2.0, 7}};
  t.model.kind = ModelKind::kTransformer;
  t.model.layers = 3;
  t.model.width = 96;
  t.model.heads = 3;
  t.model.context = 64;
  t.model.path = "models/gpt.pt";  // travels even when another kind ignores it
  t.model.avg = {"wte.*", "*head*"};
  t.data.kind = DataKind::kText;
  t.data.dir = "/srv/corpus";
  t.data.holdout_every = 7;
  t.data.eval_examples = 999;
  t.inner.lr = 3e-4f;
  t.inner.beta2 = 0.95f;
  t.inner.weight_decay = 0.1f;
  t.inner.warmup_steps = 17;
  t.inner.muon = true;
  t.inner.muon_momentum = 0.9f;
  t.inner.total_steps = 1700;
  t.outer.fragments = 12;
  t.outer.sync_every = 24;
  t.outer.quorum = 2;
  t.outer.grace_gamma = 0.5;
  t.outer.nesterov = {0.5f, 0.9f, 4};  // delayed Nesterov travels too
  t.outer.push_codec = Codec::kInt8;
  t.outer.push_block = 128;
  t.outer.broadcast_codec = Codec::kBf16;
  t.outer.blend_alpha = 0.25f;
  t.outer.carry_progress = false;  // excludes blend_alpha
  t.outer.barrier = true;
  t.outer.final_flush = false;
  t.outer.lr_warmup_rounds = 7;
  t.outer.broadcast_block = 32;
  t.outer.sync_every_start = 6;
  t.outer.sync_ramp_rounds = 40;
  t.membership.max_learners = 9;
  t.outer.sync_by_speed = true;
  t.outer.push_density = 0.25f;
  t.outer.push_error_feedback = false;  // carry_progress is off here
  t.hardware = Hardware::kDedicated;
  t.hardware_headroom = 1.6;
  return t;
}

std::vector<Message> one_of_each() {
  Welcome w;
  w.learner = 2;
  w.incarnation = 5;
  w.topology = unusual_topology();
  w.fragments = {{0, 10, some_payload(Codec::kFp32, 100, 1)}, {1, 11, some_payload(Codec::kBf16, 50, 2)}};
  w.moments = OptimizerState{77, some_payload(Codec::kFp32, 150, 3), some_payload(Codec::kFp32, 150, 4)};
  Welcome bare = w;
  bare.moments.reset();
  Welcome topology_answer;  // to a learner that asked for the topology: with the model's layout
  topology_answer.topology = unusual_topology();
  topology_answer.layout = {{"wte.weight", {256, 96}}, {"h.0.ln1.bias", {96}}, {"scale", {}}};
  Register labelled{4, 11, 9, "", {}};  // a Python learner's own speed and batch for the report
  labelled.speed = 0.35;
  labelled.batch_size = 48;
  return {
      Register{3, 9, 0x1234567890abcdefULL, std::string("s3cret\0token", 12), {}},
      Register{3, 10, 7, "", {{0, 12, some_payload(Codec::kFp32, 40, 11)}, {1, 13, some_payload(Codec::kFp32, 8, 12)}}},
      MomentsPull{77, 1},
      Moments{77, OptimizerState{1234, some_payload(Codec::kBf16, 50, 13), some_payload(Codec::kBf16, 50, 14)}},
      w,
      bare,
      Pull{4, 1000, true},
      Push{1, 2, 3, 4, 5, 6, 7, 0.25, some_payload(Codec::kInt4, 333, 5)},
      Broadcast{3, 44, some_payload(Codec::kFp32, 20, 6), false, 0, {}},
      Broadcast{3, 45, some_payload(Codec::kInt4, 20, 7), true, 44, {0, 2}},
      Broadcast{3, 46, some_payload(Codec::kFp32, 20, 8), false, 0, {2}, {1234}, /*repair=*/true},
      Progress{1, 2, 300, 19200, 0.0125, {{4, 10}, {5, 3}}, 1.75f},
      Progress{1, 2, 301, 19264, 0.0125, {{4, 10}, {5, 4}}, 1.5f, 0x9e3779b97f4a7c15ULL, 12.75},
      Reject{RejectReason::kStale, 3, "base version 2 < 4 - 1"},
      Done{"token budget of 2500000 reached"},
      topology_answer,
      labelled,
      Evaluation{2, 7, {12, 11, 12}, 1.2345, 1.781, std::nan(""), 4096},
      Leave{5, 3, "SIGTERM"},
      Reject{RejectReason::kFull, kNoFragment, "all 2 open slots are taken"},
      Hello{0, Purpose::kClaim, std::string(32, 'p'), 0x77},
  };
}

bool mentions(const Status& s, std::string_view text) { return s.message().find(text) != std::string_view::npos; }

// Builds an Envelope by hand, to write values the typed encoder never would,
// with a valid checksum trailer.
template <class Fill>
std::vector<uint8_t> raw_envelope(Fill fill) {
  capnp::MallocMessageBuilder b;
  fill(b.initRoot<schema::Envelope>());
  const auto words = capnp::messageToFlatArray(b);
  const auto bytes = words.asBytes();
  std::vector<uint8_t> out(bytes.begin(), bytes.end());
  const uint32_t crc = crc32c(out), magic = 0x314c5441;
  out.insert(out.end(), reinterpret_cast<const uint8_t*>(&crc), reinterpret_cast<const uint8_t*>(&crc) + 4);
  out.insert(out.end(), reinterpret_cast<const uint8_t*>(&magic), reinterpret_cast<const uint8_t*>(&magic) + 4);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(messages_test)

BOOST_AUTO_TEST_CASE(every_message_round_trips) {
  for (const Message& m : one_of_each()) {
    const auto bytes = encode_message(m);
    BOOST_CHECK_EQUAL(bytes.size() % 8, 0u);
    auto back = decode_message(bytes);
    BOOST_REQUIRE_MESSAGE(back.ok(), message_name(m) << ": " << back.status().to_string());
    BOOST_CHECK_MESSAGE(*back == m, message_name(m) << " changed on the way");
  }
}

BOOST_AUTO_TEST_CASE(a_sharded_syncer_travels_in_the_topology) {
  Welcome w;
  w.topology.syncer.shards = 3;  // decoupled, the default mode: the only one shards allow
  auto back = decode_message(encode_message(w));
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK_EQUAL(std::get<Welcome>(*back).topology.syncer.shards, 3);
  w.topology.mode = Mode::kDp;  // an impossible pair is refused on arrival, by name
  auto refused = decode_message(encode_message(w));
  BOOST_REQUIRE(!refused.ok());
  BOOST_CHECK(std::string(refused.status().message()).find("syncer.shards = 3 needs mode") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(eager_updates_travel_in_the_topology) {
  Welcome w;
  w.topology.outer.eager_updates = true;
  auto back = decode_message(encode_message(w));
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK(std::get<Welcome>(*back).topology.outer.eager_updates);
  w.topology.outer.carry_progress = false;  // an impossible pair is refused on arrival, by name
  auto refused = decode_message(encode_message(w));
  BOOST_REQUIRE(!refused.ok());
  BOOST_CHECK(std::string(refused.status().message()).find("outer.eager_updates") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(streamed_fragments_travel_in_the_topology_and_a_bad_count_is_refused) {
  Welcome w;
  w.topology.outer.stream = 3;
  auto back = decode_message(encode_message(w));
  BOOST_REQUIRE_MESSAGE(back.ok(), back.status().to_string());
  BOOST_CHECK_EQUAL(std::get<Welcome>(*back).topology.outer.stream, 3);
  w.topology.outer.stream = w.topology.outer.fragments + 1;  // more than there are fragments
  auto refused = decode_message(encode_message(w));
  BOOST_REQUIRE(!refused.ok());
  BOOST_CHECK(std::string(refused.status().message()).find("outer.stream") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_register_with_an_impossible_speed_label_is_refused) {
  for (double speed : {-1.0, std::nan(""), std::numeric_limits<double>::infinity(), 1e9}) {
    auto m = decode_message(raw_envelope([&](schema::Envelope::Builder e) { e.initRegister().setSpeed(speed); }));
    BOOST_REQUIRE_MESSAGE(!m.ok(), "speed " << speed << " was taken");
    BOOST_CHECK_MESSAGE(mentions(m.status(), "speed"), m.status().to_string());
  }
}

// A push whose steps run backwards, or a broadcast whose merged steps do not
// match its merged learners, cannot be credited: refused, saying which.
BOOST_AUTO_TEST_CASE(a_push_or_broadcast_with_inconsistent_merge_steps_is_refused) {
  auto push = decode_message(raw_envelope([](schema::Envelope::Builder e) {
    auto p = e.initPush();
    p.setSince(9);
    p.setThrough(4);
  }));
  BOOST_REQUIRE(!push.ok());
  BOOST_CHECK_MESSAGE(mentions(push.status(), "since step 9 through step 4"), push.status().to_string());
  auto broadcast = decode_message(raw_envelope([](schema::Envelope::Builder e) {
    auto b = e.initBroadcast();
    b.initMerged(2);
    b.initMergedThrough(1);
  }));
  BOOST_REQUIRE(!broadcast.ok());
  BOOST_CHECK_MESSAGE(mentions(broadcast.status(), "1 merged steps for 2 merged learners"),
                      broadcast.status().to_string());
  auto repair = decode_message(raw_envelope([](schema::Envelope::Builder e) {
    auto b = e.initBroadcast();
    b.setRepair(true);
    b.setDelta(true);  // a repair a learner could not adopt without the version it missed
    b.initMerged(1);
    b.initMergedThrough(1);
  }));
  BOOST_REQUIRE(!repair.ok());
  BOOST_CHECK_MESSAGE(mentions(repair.status(), "a repair holds whole values"), repair.status().to_string());
}

BOOST_AUTO_TEST_CASE(the_default_topology_is_valid_and_round_trips) {
  BOOST_REQUIRE(validate(Topology{}).ok());
  Welcome w;
  auto back = decode_message(encode_message(w));
  BOOST_REQUIRE(back.ok());
  BOOST_CHECK(std::get<Welcome>(*back).topology == Topology{});
}

BOOST_AUTO_TEST_CASE(every_truncation_of_a_message_is_refused) {
  const auto bytes = encode_message(Push{1, 2, 3, 4, 5, 6, 7, 0.5, some_payload(Codec::kInt4, 64, 8)});
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = decode_message(std::span(bytes.data(), n));
    BOOST_CHECK_MESSAGE(!r.ok(), "a prefix of " << n << " bytes was accepted");
  }
}

BOOST_AUTO_TEST_CASE(padded_and_oversized_messages_are_refused) {
  auto bytes = encode_message(Pull{1, 2});
  auto padded = bytes;
  padded.resize(bytes.size() + 8, 0);
  BOOST_CHECK(mentions(decode_message(padded).status(), "no checksum trailer"));
  auto big = decode_message(bytes, bytes.size() - 1);
  BOOST_CHECK(big.status().code() == Status::Code::kOutOfRange);
}

BOOST_AUTO_TEST_CASE(a_well_framed_message_with_extra_words_inside_is_refused) {
  // Padding between the envelope and a recomputed trailer: the checksum is
  // right, the framing is not.
  auto bytes = encode_message(Pull{1, 2});
  std::vector<uint8_t> body(bytes.begin(), bytes.end() - 8);
  body.resize(body.size() + 8, 0);
  const uint32_t crc = crc32c(body), magic = 0x314c5441;
  body.insert(body.end(), reinterpret_cast<const uint8_t*>(&crc), reinterpret_cast<const uint8_t*>(&crc) + 4);
  body.insert(body.end(), reinterpret_cast<const uint8_t*>(&magic), reinterpret_cast<const uint8_t*>(&magic) + 4);
  BOOST_CHECK(mentions(decode_message(body).status(), "trailing"));
}

BOOST_AUTO_TEST_CASE(random_bytes_never_crash_the_decoder) {
  Rng rng(2024);
  int refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> junk(8 * (1 + rng.below(64)));
    for (auto& b : junk) b = static_cast<uint8_t>(rng.below(256));
    if (trial % 2) std::memset(junk.data(), 0, 4);  // a plausible one-segment header
    refused += !decode_message(junk).ok();
  }
  BOOST_TEST_MESSAGE(refused << " of 2000 random buffers refused");
  BOOST_CHECK_GT(refused, 1900);
}

BOOST_AUTO_TEST_CASE(any_flipped_byte_is_refused) {
  Welcome w;
  w.fragments = {{0, 1, some_payload(Codec::kInt4, 64, 9)}};
  const auto bytes = encode_message(w);
  for (size_t i = 0; i < bytes.size(); ++i) {
    auto copy = bytes;
    copy[i] ^= 0x5a;
    BOOST_CHECK_MESSAGE(!decode_message(copy).ok(), "byte " << i << " flipped and accepted");
  }
}

BOOST_AUTO_TEST_CASE(out_of_range_enums_are_refused_by_name) {
  auto bad_codec = raw_envelope([](schema::Envelope::Builder e) {
    e.initPush().initDelta().setCodec(static_cast<schema::Codec>(77));
  });
  BOOST_CHECK(mentions(decode_message(bad_codec).status(), "unknown codec 77"));
  auto bad_reason = raw_envelope([](schema::Envelope::Builder e) {
    e.initReject().setReason(static_cast<schema::RejectReason>(40));
  });
  BOOST_CHECK(mentions(decode_message(bad_reason).status(), "unknown reject reason 40"));
}

BOOST_AUTO_TEST_CASE(a_welcome_with_an_invalid_topology_is_refused) {
  Welcome w;
  w.topology.outer.quorum = 9;  // more than the 4 learners
  const auto r = decode_message(encode_message(w));
  BOOST_CHECK(!r.ok());
  BOOST_CHECK_MESSAGE(mentions(r.status(), "outer.quorum = 9 exceeds the 4 learners"), r.status().to_string());
}

BOOST_AUTO_TEST_CASE(validate_names_the_offending_key) {
  const auto expect = [](Topology t, std::string_view text) {
    const Status s = validate(t);
    BOOST_CHECK_MESSAGE(mentions(s, text), "wanted '" << text << "', got " << s.to_string());
  };
  Topology t;
  t.learners[2].speed = 0;
  expect(t, "learners[2].speed = 0 is outside");
  t = {};
  t.outer.push_block = 3;
  expect(t, "outer.push_block: block size 3 for int4");
  t = {};
  t.outer.broadcast_codec = Codec::kInt4;
  t.outer.broadcast_block = 4;
  expect(t, "outer.broadcast_block: block size 4 for int4");
  t = {};
  t.outer.carry_progress = true;
  t.outer.blend_alpha = 0.5f;
  expect(t, "outer.carry_progress and outer.blend_alpha");
  t = {};
  t.model.kind = ModelKind::kTransformer;
  t.data.kind = DataKind::kText;
  t.model.width = 100;
  t.model.heads = 3;
  expect(t, "model.width = 100 is not divisible by model.heads = 3");
  t = {};
  t.inner.beta1 = std::numeric_limits<float>::quiet_NaN();
  expect(t, "inner.beta1");
  t = {};
  t.tokens = 0;
  expect(t, "would never end");
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace atl
