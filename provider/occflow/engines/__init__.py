"""Real engines, one folder each (deltars/, spark/, maxcompute/), never importing each other."""
