#!/usr/bin/env bash
# Re-cut a carried torch (../shared/tools/carry-torch's parts in .carry/VERSION/NN/) into chunks
# that fit one device call beside this tree, and print the calls that carry and assemble them.
#
#   tools/carry_chunks.sh VERSION [LIMIT_MIB]     (run on the CPU machine, from the repository root)
#
# Why: a device call carries the working tree and the paths named in `carry`, 64 MiB in all
# (LIMIT_MIB, default 64). carry-torch cuts its parts to 58 MiB, which no longer fits beside a
# tree of more than a few MiB; the calls were refused ("the working tree is larger than 64 MiB").
# Here every part of .carry/VERSION/ goes into one tar stream, split into chunks of the room the
# tree leaves (less a margin), each in .carry/VERSION-chunks/NN/ (git-ignored with .carry/). The
# last call printed has tools/device_lease.sh assemble join the chunks on the device, unpack
# carry-torch's parts into /tmp/carry and run its assemble.sh, which checks every wheel's sha256
# and installs /tmp/torch-VERSION.
set -euo pipefail
version=${1:?usage: tools/carry_chunks.sh VERSION [LIMIT_MIB]}
limit=${2:-64}
src=.carry/$version
dst=.carry/$version-chunks
[ -f "$src/manifest.json" ] || [ -n "$(ls "$src"/*/assemble.sh 2>/dev/null)" ] \
    || { echo "carry_chunks: no carry-torch parts in $src (run ../shared/tools/carry-torch $version first)" >&2; exit 2; }
case $limit in ''|*[!0-9]*) echo "carry_chunks: LIMIT_MIB must be a whole number of MiB, got '$limit'" >&2; exit 2 ;; esac
# what a call sends besides the chunk: tracked files and untracked ones git does not ignore
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null \
       | awk '{s += $1} END {print s + 0}')
room=$(( limit * 1024 * 1024 - tree - 4 * 1024 * 1024 ))   # 4 MiB of margin
[ "$room" -ge $(( 8 * 1024 * 1024 )) ] \
    || { echo "carry_chunks: the tree ($((tree / 1048576)) MiB) leaves under 8 MiB of the $limit MiB a call carries" >&2; exit 2; }
tmp=$(mktemp -d "${dst}.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd "$src" && tar cf - -- */*) | split -b "$room" -d -a 3 - "$tmp/chunk."
for f in "$tmp"/chunk.*; do n=${f##*.}; mkdir -p "$tmp/$n" && mv "$f" "$tmp/$n/"; done
rm -rf "$dst" && mv "$tmp" "$dst"   # whole or not at all: never a half-cut folder
trap - EXIT
parts=$(ls "$dst" | sort)
count=$(echo "$parts" | wc -l)
echo "$version: $(du -sh "$src" | cut -f1) in $count chunk(s) of at most $((room / 1048576)) MiB (the tree is $((tree / 1048576)) MiB); make these calls back to back:"
last=$(echo "$parts" | tail -1)
for n in $parts; do
  cmd="mkdir -p /tmp/chunks-$version && cp $dst/$n/* /tmp/chunks-$version/"
  if [ "$n" = "$last" ]; then
    cmd="$cmd && tools/device_lease.sh assemble $version && . /tmp/torch-$version.env && python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())'"
  fi
  echo "  run(command=\"$cmd\", carry=[\"$dst/$n\"])"
done
