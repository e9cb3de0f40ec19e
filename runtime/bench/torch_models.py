"""The models scripts/bench-torch trains: an MLP, and ResNet-18 as torchvision defines it (written
out here: PyPI's torchvision does not import beside the CPU torch wheels, and the architecture is
what matters for the gradients' sizes and the step's compute)."""

import torch
from torch import nn


def make_mlp():
    """8 Linear(1024, 1024) layers with ReLU between them: 8.4 M parameters, 33.6 MB of gradients."""
    layers = []
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision.models.resnet18's layers, in its order (11.2 M parameters with 10 classes)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths = [64, 128, 256, 512]
        layers, inplanes = [], 64
        for i, planes in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes)))
            inplanes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def make_conv(name):
    """torchvision's model of that name where torchvision imports, else ringrun's ResNet-18."""
    try:
        import torchvision.models as models
        return getattr(models, name)(num_classes=10), f"torchvision {name}"
    except (ImportError, RuntimeError):  # RuntimeError: PyPI's torchvision beside a CPU torch wheel
        if name != "resnet18":
            raise SystemExit(f"bench-torch: --conv-model {name} needs torchvision; without it only resnet18")
        return ResNet18(10), "ResNet-18 (torchvision's architecture, defined in torch_models.py)"
