"""readv() after lseek (offset = file position, size = sum of the buffers) and preadv() at an offset.

  lseek(fd, 8192) ; readv(fd, [1000, 3000]) -> offset 8192, size 4000
  preadv(fd, [4096, 4096], 20480)           -> offset 20480, size 8192
  read(fd, 100)                             -> offset 12192 (after the readv)
"""

import os
import sys

from _truth import write_truth


def main(data, truth):
    fd = os.open(data, os.O_RDONLY)
    os.lseek(fd, 8192, os.SEEK_SET)
    os.readv(fd, [bytearray(1000), bytearray(3000)])
    os.preadv(fd, [bytearray(4096), bytearray(4096)], 20480)
    os.read(fd, 100)
    os.close(fd)
    write_truth(truth, fd=fd, reads=[["readv", 8192, 4000], ["preadv", 20480, 8192], ["read", 12192, 100]])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
