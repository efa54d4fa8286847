"""Turns `py-spy dump --json` output (stdin) into lines the Rust test reads without a JSON
library: `T <thread_id>` then `F <name>\t<filename>\t<line>` per frame, leaf first."""
import json
import sys

for thread in json.load(sys.stdin):
    print("T", thread["thread_id"])
    for f in thread["frames"]:
        print("F " + "\t".join((f["name"], f["filename"], str(f["line"]))))
