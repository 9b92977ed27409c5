// ExternalModel: a model that atoll does not run (model.kind = "external").
//
// Python learners (atoll.Learner) train it in their own loops, on their own
// data and devices; the syncer needs only its layout and initial values,
// which come from a model file (atoll/model_file.h) that atoll.save_model()
// writes. The layout follows module_layout()'s rule with model.avg, exactly
// as a Python learner computes it from named_parameters(), so both have the
// same fingerprint. init() writes the file's values: the seed does not
// change them. Held-out quality comes from the learners' evaluators
// (atoll.Evaluator), not from atoll: forward_backward() and evaluate() must
// not be called (they return NaN).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "atoll/model.h"
#include "atoll/module_layout.h"
#include "atoll/status.h"

namespace atl {

// The model whose `tensors` (the module's order, named as named_parameters()
// names them) start at `values`; model.avg's names take the weighted mean.
// atoll/job.h makes one from a model file.
Result<std::unique_ptr<Model>> make_external_model(const std::vector<NamedShape>& tensors, std::vector<float> values,
                                                   const std::vector<std::string>& avg, std::string description);

}  // namespace atl
