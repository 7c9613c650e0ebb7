"""specjax.drafters: proposers of draft paths with their exact draft distributions."""

from specjax.drafters.base import Draft, Drafter
from specjax.drafters.model import ModelDrafter
from specjax.drafters.ngram import NgramDrafter

__all__ = ["Draft", "Drafter", "ModelDrafter", "NgramDrafter"]
