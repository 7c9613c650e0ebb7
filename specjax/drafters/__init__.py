"""specjax.drafters: proposers of draft paths with their exact draft distributions."""

from specjax.drafters.base import Draft, Drafter
from specjax.drafters.fanout import geometric_fan_out, uniform_fan_out
from specjax.drafters.feature import FeatureDrafter
from specjax.drafters.model import ModelDrafter
from specjax.drafters.ngram import NgramDrafter
from specjax.drafters.speculation import SSDConfig
from specjax.drafters.ssd import SSDDrafter

__all__ = [
    "Draft",
    "Drafter",
    "FeatureDrafter",
    "ModelDrafter",
    "NgramDrafter",
    "SSDConfig",
    "SSDDrafter",
    "geometric_fan_out",
    "uniform_fan_out",
]
