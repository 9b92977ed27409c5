// Incarnations: how a learner's lives are numbered.
//
// The syncer tells a learner's lives apart by number and takes a higher one
// as newer. In one process they count 1, 2, 3, ... A learner process that
// joins over the network starts its count at incarnation_base(): above any
// process started before it, and apart from one started in the same
// millisecond elsewhere.
#pragma once

#include <cstdint>

namespace atl {

// (unix_ms << 20) | the low 20 bits of `noise`: ordered by the clock, told
// apart within a millisecond by the noise. Valid until the year 10889.
uint64_t incarnation_base(uint64_t unix_ms, uint64_t noise);

// The same with the wall clock and fresh random noise.
uint64_t incarnation_base();

}  // namespace atl
