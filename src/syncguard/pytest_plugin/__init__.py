"""pytest_plugin"""
