"""Test-session settings shared by every test module and the CLI subprocesses they start."""

import os
import tempfile

# One persistent compilation cache for this test session (never the user's own cache): CLI
# subprocesses that compile the same programs load them from here.
os.environ.setdefault("SPECJAX_COMPILATION_CACHE", tempfile.mkdtemp(prefix="specjax-xla-"))
