"""File systems: the one mountinfo parser (``mounts``) and the one table of what each file system does
(``knowledge``).
"""
