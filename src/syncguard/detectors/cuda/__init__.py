"""detectors/cuda"""
