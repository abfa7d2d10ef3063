"""A forked child reads through the fd it inherited (same open file description, other pid).

  parent: pread 4 KiB at 0 before the fork, 8192 after the child exits
  child:  pread 4 KiB at 4096*16, then read() 100 bytes after lseek(…, 40960)
"""

import os
import sys

from _truth import write_truth


def main(data, truth):
    fd = os.open(data, os.O_RDONLY)
    os.pread(fd, 4096, 0)
    child = os.fork()
    if child == 0:
        os.pread(fd, 4096, 65536)
        os.lseek(fd, 40960, os.SEEK_SET)
        os.read(fd, 100)
        os._exit(0)
    os.waitpid(child, 0)
    os.pread(fd, 4096, 8192)
    os.close(fd)
    write_truth(truth, fd=fd, child_pid=child)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
