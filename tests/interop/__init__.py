"""The interop tier: the built .pyz driven by real, independently written MCP clients.

A package, so that this folder's conftest.py is imported as `interop.conftest` and leaves the
module name `conftest` (the main suite's) alone.
"""
