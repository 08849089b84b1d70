"""`recipe plan` / `recipe apply` and the lifecycle of what apply started.

pipeline.py asks the recipe's backend for the ordered steps (doctor -> fetch -> prepare-checkpoint
-> install-engine -> patch -> launch -> wait-ready -> smoke; steps.py and docker_steps.py hold
the shared ones) and runs them under the lifecycle lock with stamps; lifecycle.py answers
status / stop / logs / restart; runners/ start and stop the server (native process or docker
container) behind one interface; server.py is the typed record of what was started.
"""
