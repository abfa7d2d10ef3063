"""diffusers from_pretrained of a local UNet directory."""

import sys

import torch
from _digest import report
from diffusers import UNet2DConditionModel

torch.manual_seed(0)
report("diffusers", UNet2DConditionModel.from_pretrained(sys.argv[1]).state_dict())
