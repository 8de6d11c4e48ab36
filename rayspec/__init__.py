"""rayspec: tree speculative decoding as a distributed service."""

__version__ = "0.1.0"
