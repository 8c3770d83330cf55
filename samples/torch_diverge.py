"""A few seeded SGD steps of a small model whose backward is not deterministic on CUDA, and a
way to change one weight by a tiny amount: the material of `cudump bisect`'s GPU tests.

Model: tokens -> embedding (emb, V x D) -> fc1 (D -> H) -> ReLU -> fc2 (H -> C), no biases,
against fixed random targets; seeded, made on the GPU. The embedding is read with
`index_select`, whose backward is `index_add_`: on CUDA one atomic add per element of every
token's gradient, into the V rows of the embedding's gradient. Each row gets B / V of them, in
whatever order the GPU runs them, so the float sums (and from the next step on, everything
computed from the embedding) may differ bitwise between two identical runs.

Nothing on the GPU is a single number: the per-token losses go backward with the weights of
their mean (1/B each), and the loss printed is averaged on the host. A one-element buffer
that such a difference reaches differs between identical runs only some of the time, so
`cudump bisect --baseline-runs N` could miss it in A's runs and take it for the divergence.

TORCH_DIVERGE_POKE=LAYER:INDEX:DELTA (LAYER emb, fc1 or fc2; INDEX into the weight
flattened) adds DELTA to that one element before training. The add is one launch of
PyTorch's elementwise add kernel over the whole weight (weight.add_(onehot, alpha=DELTA),
the one-hot tensor made on the host): DELTA is a by-value parameter of that launch (its
AddFunctor's alpha), and its buffers, the weight and the one-hot tensor, are the same in a
run with another DELTA. A DELTA of 0 makes the same launch and changes nothing, so a poked
run and one poked by 0 at the same place run the same launches, and that add is the first
that differs, from equal inputs (without the variable there is no such launch):

    cudump bisect --env-a TORCH_DIVERGE_POKE=fc1:1234:0 \
        --env-b TORCH_DIVERGE_POKE=fc1:1234:0.001 -- python3 samples/torch_diverge.py

fc1's weight (2 MiB) is the first tensor over 1 MiB: the caching allocator gives it a
segment of its own, and the one-hot tensor lands right behind it. cudump ends a buffer where
the next buffer it has seen in the same allocation begins, so that launch's buffers read the
same whether cudump saw every launch before it (a digest run) or only that one (a snapshot
run, an --inject run).

usage: torch_diverge.py [STEPS]   (default 8; about 20 launches a step)
Prints `poke LAYER.weight[INDEX]: OLD -> NEW (delta DELTA)` when poking (OLD and NEW the
float32 values, exactly), then `loss L` (the last step's mean loss) and `params sha256:HEX`
(of every weight's bytes after the last step). TORCH_DIVERGE_DEVICE=cpu runs it on the host
(where index_add_ is deterministic), to look at without a GPU.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass

import torch
from torch import nn

V, D, H, C = 16, 256, 2048, 64      # vocabulary, embedding width, hidden width, outputs
B = 4096                            # tokens a step: 256 of each token, in random order
LR = 0.1
# The embedding is kept small and scaled up where it is read, so that a step moves it by
# about a tenth: the last bits in which its gradient differs between runs then reach its
# values. A weight that a step moves by a millionth of itself rounds most such differences
# away, and two identical runs would differ only some of the time.
EMB_SCALE = 128.0
POKE_VAR = "TORCH_DIVERGE_POKE"


class Model(nn.Module):
    def __init__(self, device: str) -> None:
        super().__init__()
        # fc1 first: its weight is the first tensor of the large pool (see the docstring).
        self.fc1 = nn.Linear(D, H, bias=False, device=device)
        self.fc2 = nn.Linear(H, C, bias=False, device=device)
        self.emb = nn.Parameter(torch.randn(V, D, device=device) / EMB_SCALE)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.emb.index_select(0, tokens) * EMB_SCALE    # backward: index_add_, atomics
        return self.fc2(torch.relu(self.fc1(x)))

    def weight(self, layer: str) -> nn.Parameter:
        return {"emb": self.emb, "fc1": self.fc1.weight, "fc2": self.fc2.weight}[layer]


@dataclass(frozen=True)
class Poke:
    layer: str
    index: int
    delta: float

    @classmethod
    def parse(cls, text: str) -> Poke:
        parts = text.split(":")
        try:
            layer, index, delta = parts[0], int(parts[1]), float(parts[2])
        except (IndexError, ValueError):
            raise ValueError("expected LAYER:INDEX:DELTA, e.g. fc1:1234:0.001") from None
        if len(parts) != 3 or layer not in ("emb", "fc1", "fc2"):
            raise ValueError("expected LAYER:INDEX:DELTA with LAYER emb, fc1 or fc2")
        return cls(layer, index, delta)

    def apply(self, model: Model) -> str:
        """Adds delta to the element, in one launch on the weight's device (see the
        docstring); the line that says so."""
        weight = model.weight(self.layer)
        if not 0 <= self.index < weight.numel():
            raise ValueError(f"index {self.index} is outside {self.layer}'s weight "
                             f"({weight.numel()} elements)")
        onehot = torch.zeros(weight.numel())
        onehot[self.index] = 1.0
        onehot = onehot.view_as(weight).to(weight.device)
        flat = weight.detach().view(-1)
        old = flat[self.index].item()
        with torch.no_grad():
            # One launch of PyTorch's elementwise add, which writes the element: on CUDA
            # vectorized_elementwise_kernel<4, BinaryFunctor<float, float, float,
            # AddFunctor<float>>, std::array<char*, 3>> (weight, weight, onehot), delta the
            # AddFunctor's alpha inside its by-value functor.
            weight.add_(onehot, alpha=self.delta)
        new = flat[self.index].item()
        return (f"poke {self.layer}.weight[{self.index}]: {old!r} -> {new!r} "
                f"(delta {self.delta!r})")


def params_hash(model: Model) -> str:
    digest = hashlib.sha256()
    for name, param in sorted(model.named_parameters()):
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def main() -> int:
    try:
        steps = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    except ValueError:
        steps = 0
    if steps < 1:
        print(f"torch_diverge.py: STEPS {sys.argv[1]!r}: give a whole number of 1 or more",
              file=sys.stderr)
        return 2
    device = os.environ.get("TORCH_DIVERGE_DEVICE", "cuda")
    poke_text = os.environ.get(POKE_VAR)
    try:
        poke = Poke.parse(poke_text) if poke_text else None
    except ValueError as err:
        print(f"torch_diverge.py: {POKE_VAR}={poke_text}: {err}", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    model = Model(device)
    # The data is made on the host and copied: no launch of its own.
    host = torch.Generator().manual_seed(1)
    tokens = (torch.arange(B) % V)[torch.randperm(B, generator=host)].to(device)
    targets = torch.randn(B, C, generator=host).to(device)
    mean_weights = torch.full((B,), 1.0 / B, device=device)
    if poke is not None:
        try:
            print(poke.apply(model), flush=True)
        except ValueError as err:
            print(f"torch_diverge.py: {POKE_VAR}={poke_text}: {err}", file=sys.stderr)
            return 2
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        losses = ((model(tokens) - targets) ** 2).mean(1)
        losses.backward(mean_weights)                  # the gradient of their mean
        opt.step()
    print(f"loss {losses.detach().cpu().double().mean().item():.9f}")
    print(f"params sha256:{params_hash(model)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
