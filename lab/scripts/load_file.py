"""safetensors load_file: one mmap of the file, tensors copied out of it."""

import sys

from _digest import report
from safetensors.torch import load_file

report("load_file", load_file(sys.argv[1]))
