#!/usr/bin/env python3
"""Writes what `jsonnet mixin/build.jsonnet` rendered (a JSON object of
path -> content, read from stdin) as files under DIR: .json with two-space
indents, .yml/.yaml with multi-line strings as literal blocks and each
rule's keys in the order people read them. Called by mixin/build.sh."""
import json
import os
import sys

import yaml

HEADER = "# Generated from mixin/ by mixin/build.sh: do not edit.\n"
RULE_KEYS = ["alert", "record", "expr", "for", "labels", "annotations"]


class Dumper(yaml.SafeDumper):
    pass


def text(dumper, s):
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


def ordered(v):
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: (RULE_KEYS.index(k) if k in RULE_KEYS else len(RULE_KEYS), k)) \
            if ("alert" in v or "record" in v) else list(v)
        return {k: ordered(v[k]) for k in keys}
    if isinstance(v, list):
        return [ordered(x) for x in v]
    return v


Dumper.add_representer(str, text)


def main():
    out = sys.argv[1]
    for path, value in json.load(sys.stdin).items():
        if path.endswith(".json"):
            body = json.dumps(value, indent=2) + "\n"
        else:
            body = HEADER + yaml.dump(ordered(value), Dumper=Dumper, sort_keys=False, width=1000)
        with open(os.path.join(out, path), "w") as f:
            f.write(body)


if __name__ == "__main__":
    main()
