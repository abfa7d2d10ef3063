"""A dup'd fd shares the file position; plain read() offsets follow lseek and earlier reads.

  lseek(fd, 12288) ; read(dup, 1000) -> offset 12288 ; read(fd, 500) -> offset 13288
  lseek(dup, 100, SEEK_CUR) -> 13888 ; read(fd, 10) -> offset 13888
"""

import os
import sys

from _truth import write_truth


def main(data, truth):
    fd = os.open(data, os.O_RDONLY)
    dup = os.dup(fd)
    os.lseek(fd, 12288, os.SEEK_SET)
    os.read(dup, 1000)
    os.read(fd, 500)
    os.lseek(dup, 100, os.SEEK_CUR)
    os.read(fd, 10)
    os.close(dup)
    os.close(fd)
    write_truth(truth, fd=fd, dup=dup, reads=[[dup, 12288, 1000], [fd, 13288, 500], [fd, 13888, 10]])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
