"""syncguard's own regression cases, and the examples users copy.

Each module holds the code under test (``merge.py``, ``batching.py``) next to its tests
(``test_*.py``): variants declare their sync behaviour as data, and the tests check it per
example on the GPU (``syncguard.audit``) and correctness everywhere.
"""
