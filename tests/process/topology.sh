# synthetic_topology FILE TOKENS LEARNERS SPEED CHECKPOINT_DIR [extra toml...]:
# a small run that needs no data, for the tests that start real processes: an
# MLP on synthetic clusters, LEARNERS learners of SPEED (batch 16), checkpoints
# in CHECKPOINT_DIR ("" for none). Slow learners (speed 0.05) sleep most of
# each step, so a run lasts long enough to kill things while the CPU stays free.
synthetic_topology() {
  local file=$1 tokens=$2 learners=$3 speed=$4 checkpoints=$5
  shift 5
  {
    cat <<TOML
mode = "decoupled"
tokens = $tokens
[model]
kind = "mlp"
hidden = [32]
[data]
kind = "synthetic"
features = 16
classes = 4
examples = 4096
[outer]
fragments = 2
sync_every = 10
[checkpoint]
dir = "$checkpoints"
TOML
    for _ in $(seq "$learners"); do printf '[[learners]]\nspeed = %s\nbatch_size = 16\n' "$speed"; done
    printf '%s\n' "$@"
  } >"$file"
}
