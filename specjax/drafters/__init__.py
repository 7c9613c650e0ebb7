"""specjax.drafters: proposers of draft paths with their exact draft distributions (SSD's draft,
which serves and builds a speculation cache instead, is :mod:`specjax.decode.ssd`)."""

from specjax.drafters.base import Draft, Drafter, DrafterBase
from specjax.drafters.feature import FeatureDrafter
from specjax.drafters.model import ModelDrafter
from specjax.drafters.ngram import NgramDrafter

__all__ = [
    "Draft",
    "Drafter",
    "DrafterBase",
    "FeatureDrafter",
    "ModelDrafter",
    "NgramDrafter",
]
