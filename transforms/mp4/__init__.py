"""MP4 media: range reads, the box walk, and the moov box turned into a spql.MediaIndex. Pure: no Beam."""
