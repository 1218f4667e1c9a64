"""The topology of the processes sharing one store: wiki locks, leases, start-up checks."""
