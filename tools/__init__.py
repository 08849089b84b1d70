"""Host tools: doctor, P2P probe, verified downloads, tiny checkpoint generators."""
