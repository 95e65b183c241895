"""Merge the JSON records a GPU run left in a folder into one file, keyed by file name, and
remove them: a device run returns a handful of files, not one per problem.

    python benchmarks/merge_results.py $OUT ab-all.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    folder, name = Path(sys.argv[1]), sys.argv[2]
    merged = {}
    for record in sorted(folder.glob("*.json")):
        if record.name == name:
            continue
        merged[record.stem] = json.loads(record.read_text())
        record.unlink()
    (folder / name).write_text(json.dumps(merged, indent=1) + "\n")
    print(f"{len(merged)} records merged into {folder / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
