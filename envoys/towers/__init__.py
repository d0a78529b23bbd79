"""The tower layouts the families share: the vision side's envoys and each kind of tower."""
