"""The LeRobot v3 input format: the info.json model and path templates, episodes files and the
data-span rule, data-file slices, tasks, and source fingerprints; v2.0 / v2.1 datasets (`v2`: episodes.jsonl
in groups of a chunk's episodes, planned as episodes files are); depth cameras (`depth`: what info.json says of
them, and LeRobot's de-quantization). Pure: no Beam."""
