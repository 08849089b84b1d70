"""`recipe rehearse`: run a recipe's real plan on any Linux machine with declared stand-ins."""
