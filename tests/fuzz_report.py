"""Print what a fuzz run of tests/test_fuzz_readers.py did, per reader: seed files, cases, how they ended, failures.

    python tests/fuzz_report.py <folder>

<folder> holds the `cases-*.json` files the test module writes when FUZZ_REPORT=<folder> is set (one per pytest
process) and, if pytest was given `--junitxml=<folder>/junit.xml`, the outcome and duration of each test. `make fuzz`
runs both. A reader's cases are summed over its seed files; "failing cases" counts the cases that raised something
other than the reader's own error (hypothesis replays a failing case while it shrinks it), "failed seeds" the
parametrised tests that failed.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    folder = argv[0]
    counts: dict[str, Counter] = defaultdict(Counter)
    examples = set()
    for path in sorted(glob.glob(os.path.join(folder, "cases-*.json"))):
        with open(path) as f:
            report = json.load(f)
        examples.add(report["examples"])
        for reader, numbers in report["counts"].items():
            counts[reader].update(numbers)
    seeds: dict[str, int] = Counter()
    failed: dict[str, list[str]] = defaultdict(list)
    seconds: dict[str, float] = Counter()
    junit = os.path.join(folder, "junit.xml")
    if os.path.isfile(junit):
        for case in ET.parse(junit).getroot().iter("testcase"):
            match = re.match(r"test_mutated_(\w+?)(\[(.*)\])?$", case.get("name", ""))
            if not match:
                continue
            reader = match.group(1)
            seeds[reader] += 1
            seconds[reader] += float(case.get("time", 0))
            if case.find("failure") is not None or case.find("error") is not None:
                failed[reader].append(match.group(3) or "-")
    if not counts:
        print(f"{folder}: no cases-*.json; run the fuzz tests with FUZZ_REPORT={folder}", file=sys.stderr)
        return 1
    print(f"fuzz run in {folder}: FUZZ_EXAMPLES={', '.join(map(str, sorted(examples)))} per seed file")
    header = f"{'reader':<18} {'seeds':>5} {'cases':>10} {'accepted':>9} {'refused':>9} {'failing cases':>13} " \
             f"{'seconds':>8} {'cases/s':>8}  failed seeds"
    print(header)
    print("-" * len(header))
    for reader in sorted(counts):
        c = counts[reader]
        rate = c["cases"] / seconds[reader] if seconds.get(reader) else 0.0
        print(f"{reader:<18} {seeds.get(reader, 0):>5} {c['cases']:>10,} {c['accepted']:>9,} {c['refused']:>9,} "
              f"{c['failed']:>13,} {seconds.get(reader, 0):>8.0f} {rate:>8.1f}  {', '.join(failed[reader]) or '-'}")
    total = sum(c["cases"] for c in counts.values())
    print(f"{'total':<18} {sum(seeds.values()):>5} {total:>10,}")
    return 1 if any(failed.values()) or any(c["failed"] for c in counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
