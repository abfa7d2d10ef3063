"""transformers from_pretrained of a local model directory (single file or sharded)."""

import sys

import torch
from _digest import report
from transformers import AutoModelForCausalLM

torch.manual_seed(0)  # anything not in the checkpoint initialises the same way in every run
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
report("transformers", model.state_dict())
