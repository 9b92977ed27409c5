@0xd1c0a3e5b2f47a19;
# A model's layout and parameter values, as one file: what atoll.save_model()
# writes from a PyTorch module (the initial weights of a run whose model atoll
# does not run itself, model.kind = "external") and what `atoll syncer
# --save-model` writes at the end of a run. On disk it sits in a checksummed
# frame (runtime/framed_record.h). Field numbers are the format: never renumber.
using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("atl::schema");

struct TensorShape {
  name @0 :Text;            # the module's parameter name, e.g. "h.0.attn.qkv.weight"
  dims @1 :List(Int64);     # row-major; empty: a scalar
}

struct ModelFile {
  formatVersion @0 :UInt32; # 1
  tensors @1 :List(TensorShape);   # in the module's named_parameters() order
  values @2 :Data;          # every tensor's values back to back, fp32 little-endian
  description @3 :Text;     # what the model is, for humans ("GPT 4x128 from train_gpt.py")
}
