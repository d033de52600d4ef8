"""One module per group of `plancast` verbs; each registers its commands on `plancast.app.app`."""
