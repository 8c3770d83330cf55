"""torchvision ResNet-18 inference (random weights, batch 8) with one layer made to go
non-finite, for cudump --check-nan:

  inf   layer3.0.conv1's weights filled with a finite 3e37 (on the host, copied in before the
        model moves to the GPU), so that convolution overflows to Inf from finite inputs;
  fill  one element of layer3.0.conv1's weight set to NaN on the GPU (w[0, 0, 0, 0] = nan,
        which PyTorch does with a 4-byte host-to-device copy, no kernel), which the layers
        after it carry on;
  none  nothing changed.

usage: python3 torch_resnet_nan.py inf|fill|none [FORWARDS]
Runs FORWARDS forwards of the same input (1 by default) and prints how many elements of the
last output are non-finite; in fill mode writes where the NaN was put (`nan at 0x...`) to
stderr.
"""

from __future__ import annotations

import sys

import torch
import torchvision


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "none"
    forwards = sys.argv[2] if len(sys.argv) > 2 else "1"
    if mode not in ("inf", "fill", "none") or not forwards.isdigit() or int(forwards) < 1:
        sys.exit("usage: torch_resnet_nan.py inf|fill|none [FORWARDS]")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    conv = model.layer3[0].conv1
    if mode == "inf":
        with torch.no_grad():
            conv.weight.fill_(3e37)         # on the host: no kernel of the GPU writes it
    model = model.cuda()
    if mode == "fill":
        with torch.no_grad():
            conv.weight[0, 0, 0, 0] = float("nan")
        print(f"nan at {conv.weight.data_ptr():#x}", file=sys.stderr)
    x = torch.randn(8, 3, 224, 224, device="cuda")
    with torch.no_grad():
        for _ in range(int(forwards)):
            y = model(x)
    torch.cuda.synchronize()
    print(f"{mode}: {int((~torch.isfinite(y)).sum())} of {y.numel()} outputs non-finite")


if __name__ == "__main__":
    main()
