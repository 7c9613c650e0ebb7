"""The command-line applications: config records checked, models built, runs printed and written.

The library (:mod:`specjax.decode`, :mod:`specjax.train`, ...) takes arrays and dataclasses; this
package turns ``configs/*.py`` records into calls to it, with one ``error:`` line for bad input.
"""
