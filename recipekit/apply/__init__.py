"""`recipe plan` / `recipe apply` and the lifecycle of what apply started.

plan.py builds the ordered steps (doctor -> fetch -> prepare-checkpoint -> install-engine ->
patch -> launch -> wait-ready -> smoke) from a backend; pipeline.py runs them under the
lifecycle lock with stamps; lifecycle.py answers status / stop / logs / restart; runners/
start and stop the server (native process or docker container).
"""
