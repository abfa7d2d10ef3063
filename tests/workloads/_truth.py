"""Helpers shared by the workload scripts."""

import json
import os
import threading

PAGE = 4096


def run_in_thread(fn, *args):
    """Run fn(*args) in a new thread; return that thread's kernel tid."""
    box = {}

    def body():
        box["tid"] = threading.get_native_id()
        fn(*args)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    return box["tid"]


def write_truth(path, **truth):
    truth.setdefault("pid", os.getpid())
    truth.setdefault("main_tid", threading.get_native_id())
    with open(path, "w") as f:
        json.dump(truth, f)
