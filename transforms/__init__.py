"""lerobot-beam-import: LeRobot v3 datasets as typed episode records, with Apache Beam.

The Beam layer lives in this package's top-level modules (`import_dataset`, `media_files`,
`write_outputs`, `messages`, `safety_net`, `read_episodes`, `render_samples`); everything below it is
pure and never imports Beam:

    transforms.lerobot    the input format: info.json, episodes files, data-file slices, fingerprints
    transforms.episode    the record: spql.* types, the episode type, frames, clips, output paths
    transforms.mp4        MP4 media: range reads, the box walk, moov -> MediaIndex
    transforms.language   language annotations, training recipes and their rendering
    transforms.reader     reading an import back: ImportReader, Episode, frame seeks
    transforms.quality    data-quality checks of an import's frames, sample times and metadata (findings)
    transforms.errors, transforms.storage   the shared ground floor (error family, fsspec I/O)
    transforms.hub        hf://datasets/... roots (ground floor, reached through storage): commits, range reads
    transforms.lease      a lease on an output root, so overlapping runs never write one output
"""
