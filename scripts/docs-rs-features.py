#!/usr/bin/env python3
"""Prints the features docs.rs builds wavesock with, comma-separated.

They are Cargo.toml's [package.metadata.docs.rs] `features`: every feature
but the one that only changes how OpenSSL is linked. .ci/run uses the same
list as its "full" feature set for clippy, the docs and the tests, so one
list decides what is documented and what is tested together.
"""
import os
import sys
import tomllib

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
with open(os.path.join(root, "Cargo.toml"), "rb") as f:
    manifest = tomllib.load(f)
features = manifest["package"]["metadata"]["docs"]["rs"]["features"]
declared = manifest["features"]
unknown = [f for f in features if f not in declared]
if unknown:
    sys.exit(f"docs.rs features not declared in [features]: {', '.join(unknown)}")
print(",".join(features))
