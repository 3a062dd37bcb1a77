"""Offline rule learning for syncguard.predict: derive the rules table from GPU runs, calibrate predictions."""
