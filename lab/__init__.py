"""lab: does seeing benchmark test data during pre-training inflate a code model's scores?"""
__version__ = "0.1.0"
