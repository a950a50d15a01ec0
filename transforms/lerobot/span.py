"""The 64 MiB rule's limit, alone in a module without pyarrow: the command line's `--help` prints it as a
default without loading the readers."""

#: The 64 MiB rule: an episodes file may span at most this many bytes of data files.
DATA_SPAN_LIMIT = 64 * 1024 * 1024
