"""`python -m hgplan.cli`: the same as the `hgplan` command."""

from hgplan.cli import main

main()
