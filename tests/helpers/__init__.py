"""Helpers the test files share: each written once here, imported where it is used."""
