"""Generated gRPC modules for thunder (see generate.py); do not edit *_pb2*.py by hand."""
