"""torch.load(mmap=True) of a .pt checkpoint; the digest touches every tensor's pages."""

import sys

import torch
from _digest import report

report("torch_load_mmap", torch.load(sys.argv[1], mmap=True, weights_only=True))
