"""``python -m specjax.calibrate``: a pair's width costs measured into a file
(:mod:`specjax.cli.calibrate`)."""
