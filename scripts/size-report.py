#!/usr/bin/env python3
"""What the one executable weighs, and what each library costs in it (docs/benchmarks.md, "Size").

  scripts/size-report.py SCRATCH WORK      SCRATCH: the build's scratch path (.build), release configuration

Links the release `announce` again exactly as SwiftPM did (the command from SCRATCH/release.yaml) with a link map,
into WORK; strips a copy and splits its debug information off (scripts/split-debug.sh); prints Markdown: the
sizes, and each library's share of the stripped file (code, data, metadata; not debug information) with its
Swift protocol conformance records, which the Swift runtime searches one by one for every uncached dynamic
cast or generic instantiation. Standard library only; needs the build done.
"""
import collections
import json
import os
import re
import subprocess
import sys


def link_command(scratch):
    lines = open(os.path.join(scratch, "release.yaml")).read().splitlines()
    for index, line in enumerate(lines):
        if re.search(r'description: "Linking \S*/release/announce"$', line):
            return json.loads(lines[index + 1].split("args:", 1)[1])
    sys.exit(f"size-report: no link command for announce in {scratch}/release.yaml; build first")


def library(path):
    archive = re.match(r".*/([^/]+\.a)\(", path)
    if archive:
        return archive.group(1)
    module = re.search(r"/release/([^/]+)\.build/", path)
    if module:
        return module.group(1)
    return "(linker: dynamic symbols, relocations, headers)" if path.startswith("<internal>") else path.split("/")[-1]


def main():
    scratch, work = sys.argv[1], sys.argv[2]
    command = link_command(scratch)
    output = os.path.join(work, "announce")
    command[command.index("-o") + 1] = output
    command += ["-Xlinker", f"-Map={output}.map"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    unstripped = os.path.getsize(output)
    split = subprocess.run([os.path.join(os.path.dirname(__file__), "split-debug.sh"), output, f"{work}/debug"],
                           check=True, capture_output=True, text=True).stdout
    debug = re.search(r"debug information in (\S+) \((\d+) bytes\)", split)
    sizes, conformances = collections.Counter(), collections.Counter()
    for line in open(f"{output}.map", errors="replace"):
        parts = line.split(None, 4)
        if len(parts) < 5:
            continue
        match = re.match(r"\s*(\S.*?):\((\S+)\)\s*$", parts[4])
        if not match:
            continue
        path, section = match.groups()
        if section.startswith(".debug") or section in (".comment", ".symtab", ".strtab", ".shstrtab"):
            continue
        name = library(path)
        size = int(parts[2], 16)
        sizes[name] += size
        if section == "swift5_protocol_conformances":
            conformances[name] += size // 4
    total = sum(sizes.values())
    mb = lambda n: f"{n / 1e6:.1f} MB"
    print("| file | size |")
    print("|---|---|")
    print(f"| `announce` as linked (with debug information) | {mb(unstripped)} |")
    print(f"| `announce` stripped (what is installed) | **{mb(os.path.getsize(output))}** |")
    print(f"| its debug information (compressed, split off by build id) | {mb(int(debug.group(2)))} |")
    print()
    print("What each part costs in the stripped executable (its sections in the link map):")
    print()
    print("| library | size | share | conformance records |")
    print("|---|---|---|---|")
    shown = 0
    for name, size in sizes.most_common():
        if size < 200_000:
            break
        shown += size
        print(f"| {name} | {mb(size)} | {size * 100 / total:.0f} % | {conformances[name]} |")
    rest = [name for name in sizes if sizes[name] < 200_000]
    print(f"| {len(rest)} others | {mb(total - shown)} | {(total - shown) * 100 / total:.0f} % "
          f"| {sum(conformances[name] for name in rest)} |")
    print(f"| **total** | {mb(total)} | | {sum(conformances.values())} |")


if __name__ == "__main__":
    main()
