"""gRPC stubs generated from protos/ by `python -m rayspec.rpc.protos`; do not edit."""
