"""The LeRobot v3 input format: the info.json model and path templates, episodes files and the
data-span rule, data-file slices, tasks, and source fingerprints. Pure: no Beam."""
