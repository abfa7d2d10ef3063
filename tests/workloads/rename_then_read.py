"""A checkpoint written under a temporary name and renamed into place (as save_pretrained does), then
read back by its final name in the same process: one (dev, ino) opened under two paths.

  rename_then_read.py DIR TRUTH    -> TRUTH: {"final": path, "temporary": path, "offsets": [...]}
"""

import os
import sys

from _truth import PAGE, write_truth


def main(directory, truth):
    temporary, final = os.path.join(directory, ".tmpab12cd"), os.path.join(directory, "model.safetensors")
    with open(temporary, "wb") as f:
        f.write(os.urandom(16 * PAGE))
    os.replace(temporary, final)
    offsets = [0, 4 * PAGE, 9 * PAGE]
    fd = os.open(final, os.O_RDONLY)
    for offset in offsets:
        os.pread(fd, PAGE, offset)
    os.close(fd)
    write_truth(truth, final=final, temporary=temporary, offsets=offsets)


if __name__ == "__main__":
    main(*sys.argv[1:])
