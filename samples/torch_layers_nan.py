# A CNN training loop whose layer2 convolution overflows to Inf from finite inputs at step 1.
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.layer1 = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.layer2(self.layer1(self.stem(x))).mean((2, 3)))


torch.manual_seed(0)
torch.backends.cudnn.allow_tf32 = False
model = Net().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 3, 32, 32, device="cuda")
y = torch.randint(0, 10, (8,), device="cuda")
for step in range(3):
    if step == 1:
        with torch.no_grad():
            model.layer2[0].weight.fill_(1e38)   # its inputs are ReLU outputs: >= 0
    opt.zero_grad()
    out = model(x)
    loss = nn.functional.cross_entropy(out, y)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print("done")
