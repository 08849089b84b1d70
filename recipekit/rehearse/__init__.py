"""`recipe rehearse`: a recipe's real plan on any Linux machine, with declared stand-ins for the
pieces that need the hardware or a non-public artifact (host facts, a loopback hub, the engine)."""
