"""Reading an import back: ImportReader, Episode, and frame-exact seeks through the MediaIndex. Pure: no Beam."""
