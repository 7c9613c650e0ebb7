"""Helpers of ``scripts/make_family_fixtures.py``: the tiny family fixtures' tokenizers
(``tokens``), families and config styles (``families``) and references (``reference``)."""
