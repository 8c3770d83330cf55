"""torchvision ResNet-18 inference (random weights, batch 8): cuDNN convolutions.

usage: python3 resnet.py [--inf] [--passes N]
--inf fills layer3.0.conv1's weights with a finite 3e37, so that its convolution
overflows to Inf and every later layer carries it. Runs N forward passes (default 3).
Prints what a user would check: how many outputs are not finite, the predicted classes and
the sum of the finite ones.
"""

from __future__ import annotations

import sys

import torch
import torchvision


def main() -> int:
    passes = int(sys.argv[sys.argv.index("--passes") + 1]) if "--passes" in sys.argv else 3
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    model = torchvision.models.resnet18(num_classes=1000).cuda().eval()
    if "--inf" in sys.argv[1:]:
        with torch.no_grad():
            model.layer3[0].conv1.weight.fill_(3e37)
    x = torch.randn(8, 3, 224, 224, generator=torch.Generator().manual_seed(1)).cuda()
    with torch.no_grad():
        for _ in range(passes):
            y = model(x)
    torch.cuda.synchronize()
    finite = torch.isfinite(y)
    print("nonfinite", int((~finite).sum()))
    print("classes", y.nan_to_num(0.0).argmax(1).tolist())
    print(f"finite sum {float(y[finite].double().sum()):.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
