"""The process: the composition root, the daemon's lifecycle, the nightly
scheduler, the health file, logging."""
