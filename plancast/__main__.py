"""`python -m plancast`: the same command as the `plancast` entry point."""

from plancast.cli import main

main()
