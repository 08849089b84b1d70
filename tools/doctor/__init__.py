"""Host doctor: facts (facts.py, collect.py, parsers.py) apart from checks (checks.py) against
what a recipe needs (requirements.py); `run_doctor(effective_or_none) -> DoctorReport`."""

from recipekit.tools.doctor.report import DoctorReport
from recipekit.tools.doctor.run import run_doctor

__all__ = ["DoctorReport", "run_doctor"]
