"""The vision side's standard envoys: the tower, its blocks, and where the image meets the text model."""
