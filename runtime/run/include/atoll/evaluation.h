// Evaluation: how a set of global parameters does on a job's held-out data,
// and what a language model writes with them. The run measures its syncer's
// model with these after training (and each snapshot of its curve); they
// need neither CAF nor a running topology.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "atoll/job.h"
#include "atoll/model.h"
#include "atoll/status.h"
#include "atoll/topology.h"

namespace atl {

// What a language model is asked to write for the report's sample.
struct EvaluationOptions {
  // The text it continues (the default topology's data are the State of the
  // Union addresses, which begin so). Empty: a newline.
  std::string sample_prompt = "Fellow-Citizens of the Senate and House of Representatives: ";
  int sample_bytes = 160;           // bytes written after the prompt
  double sample_temperature = 0.8;  // > 0; lower is more likely text, less varied
};

// `theta` on `job`'s held-out batches, on every core (evaluate_all). Each
// thread builds its model again from `topology`: a TorchScript file may have
// gone or changed since the run began, and then that thread's batches count
// as NaN loss, never a model of another layout reading past `theta`. Fails,
// saying why, when the model cannot be built or its layout is not theta's
// size. The sums are the same whatever the number of cores.
Result<EvalSums> evaluate_held_out(const Topology& topology, const Job& job, std::span<const float> theta);

// What `model` writes after options.sample_prompt with `theta`: exactly
// options.sample_bytes bytes (the prompt not included), the same for the
// same seed. Empty for a model that is not a language model (atoll's
// Transformer). REQUIRES: theta.size() == model.layout().size().
std::string sample_text(Model& model, std::span<const float> theta, const EvaluationOptions& options, uint64_t seed);

}  // namespace atl
