"""The episode record: the spql.* Arrow extension types, the episode type, typed frames, video
clips, and every output path an import writes. Pure: no Beam."""
