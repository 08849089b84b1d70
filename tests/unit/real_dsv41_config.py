"""The real DeepSeek-V4.1 config.json's text and vision blocks, shared by the tests that check geometry
against the full-size model: the one table recipekit.checkpoint.published_config holds (the full-size
sparse layouts of recipekit.hybrid.fullsize read it too)."""

from recipekit.checkpoint.published_config import PUBLISHED_TEXT as REAL_TEXT
from recipekit.checkpoint.published_config import PUBLISHED_VISION as REAL_VISION

REAL = {"text_config": REAL_TEXT, "vision_config": REAL_VISION}
