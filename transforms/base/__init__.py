"""The ground floor: what every other package of `transforms` may use. Pure: no Beam.

    errors              the error family: every failure's rule, file, episode and message
    storage             fsspec I/O: bounded reads, atomic writes, conditional creates, listings
    hub                 hf://datasets/... roots (reached through storage): commits, range reads
    run_limits          the run's own bounds: a deadline per phase, a floor rate of reads, Hub listings
    stopping            a run being stopped (SIGINT, SIGTERM): work in progress ends, none starts after it
    live_counts         what the steps have done so far in this process, for the live progress line
"""
