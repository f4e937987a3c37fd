"""Helpers shared by the test suites, imported as `support.<module>` (tests/ is on sys.path through the root
conftest): object factories and an in-memory operator for unit tests, the operator subprocess and fixtures
for cluster tests."""
