"""torch.distributed.checkpoint.load of a .distcp directory, single process: tensors of the shapes
and dtypes its metadata names, filled in place by the FileSystemReader."""

import sys

import torch
import torch.distributed.checkpoint as dcp
from _digest import report

metadata = dcp.FileSystemReader(sys.argv[1]).read_metadata().state_dict_metadata
state = {name: torch.empty(tuple(m.size), dtype=m.properties.dtype) for name, m in metadata.items()}
dcp.load(state, checkpoint_id=sys.argv[1])
report("dcp_load", state)
