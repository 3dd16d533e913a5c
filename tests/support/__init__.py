"""Helpers shared by the test modules: plain functions, classes and constants, imported by absolute
name (`from tests.support.models import SMALL`). Fixtures live in conftest.py files; no test module
imports another test module or a conftest (tests/unit/test_structure.py checks it)."""
