"""Reliability suite: bad inputs and faults, each asserting the message, the exit code and the state left."""
