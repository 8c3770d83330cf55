"""A Hugging Face BERT encoder built from its config (no download), forward passes.

usage: python3 bert.py
Prints the rounded sum and mean of the last hidden state.
"""

from __future__ import annotations

import sys

import torch
from transformers import BertConfig, BertModel


def main() -> int:
    torch.manual_seed(0)
    config = BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024, vocab_size=8192)
    model = BertModel(config).cuda().eval()
    ids = torch.randint(0, 8192, (4, 128), generator=torch.Generator().manual_seed(1)).cuda()
    with torch.no_grad():
        for _ in range(3):
            out = model(input_ids=ids).last_hidden_state
    torch.cuda.synchronize()
    print(f"hidden {tuple(out.shape)} mean {float(out.double().mean()):.4f} "
          f"absmean {float(out.double().abs().mean()):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
